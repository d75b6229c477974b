"""Flickr30k: the full 31,783-image set (Long-CLIP family) and Karpathy's 1k test / 1,014 val splits."""

from hnbench.data.benchmarks.coco import KARPATHY, RETRIEVAL_ANNOTATIONS, SFR_DATASETS
from hnbench.data.benchmarks.protocol import Layout, Protocol
from hnbench.data.benchmarks.spec import BenchmarkSpec, Resource

_FORM = "https://shannon.cs.illinois.edu/DenotationGraph/"
TOKENS = Resource("flickr30k.tar.gz", extract=True,
                  manual=f"request Flickr30k through the form at {_FORM}; pass the flickr30k.tar.gz it links to "
                         "(it holds results_20130124.token) with --local flickr30k.tar.gz")
IMAGES = Resource("flickr30k-images.tar", extract=True,
                  manual=f"request Flickr30k through the form at {_FORM} (or take the images from Kaggle or Hugging "
                         "Face nlphuji/flickr30k); pass flickr30k-images.tar with --local")

_IMAGES = {"image_dirs": ("flickr30k-images", "flickr30k_images", "flickr30k_images/flickr30k_images", "images"),
           "images_from": f"the images are flickr30k-images.tar ({_FORM}, by request), unpacked into flickr30k-images/"}
_KARPATHY = {**_IMAGES, "file": "dataset_flickr30k.json", "dirs": ("", "karpathy", "caption_datasets"),
             "from": f"Karpathy's {KARPATHY.filename} ({KARPATHY.url})"}

# the other release files of the same sets: TULIP's Kaggle results.csv (full), CLIP_benchmark's and LLM2CLIP's 1k test
_KAGGLE = ("the Kaggle copy hsankesara/flickr-image-dataset (flickr30k_images/results.csv; TULIP's "
           "Datasets/flickr/results.csv)")
_FULL_LAYOUTS = (
    Layout("flickr-kaggle-csv", {"file": "results.csv", "dirs": ("", "flickr30k_images", "flickr", "Datasets/flickr"),
                                 "from": _KAGGLE}, keep_empty=True),
)
_KARPATHY_TEST_LAYOUTS = (
    Layout("clipbench-flickr-txt", {"file": "flickr30k_test_karpathy.txt", "dirs": ("", "flickr30k-images", "karpathy"),
                                    "from": f"CLIP_benchmark's annotations ({RETRIEVAL_ANNOTATIONS}/"
                                            "flickr30k_test_karpathy.txt)"}),
    Layout("caption-list-json", {"file": "flickr30k_test.json", "dirs": ("", "annotations", "flickr30k"),
                                 "from": f"LLM2CLIP's setup_eval_datasets.sh ({SFR_DATASETS}/flickr30k_test.json)"}),
)

SPEC = BenchmarkSpec(
    name="flickr30k",
    title="Flickr30k (full set, Karpathy test and val)",
    publisher="University of Illinois (Young et al.); Karpathy & Fei-Fei's splits",
    homepage=_FORM,
    license="captions: the Flickr30k terms (research use, by request); images: Flickr terms of use",
    # As the Flickr30k page (shannon.cs.illinois.edu/DenotationGraph) asks to cite it (TACL 2014).
    citation="""@article{young2014image,
  title={From image descriptions to visual denotations: New similarity metrics for semantic inference over event
    descriptions},
  author={Young, Peter and Lai, Alice and Hodosh, Micah and Hockenmaier, Julia},
  journal={Transactions of the Association for Computational Linguistics},
  volume={2},
  pages={67--78},
  year={2014}
}""",
    layout="results_20130124.token and flickr30k-images/ (flickr30k.tar.gz, flickr30k-images.tar); for the "
           "Karpathy protocols dataset_flickr30k.json (caption_datasets.zip)",
    protocols=(
        Protocol("full", ("longclip-splits", "tulip-splits"), 31783, 158915, "flickr-token", "raw",
                 "every line of results_20130124.token: all 31,783 images, 5 captions each (Long-CLIP, TULIP, FineLIP)",
                 {**_IMAGES, "file": "results_20130124.token", "dirs": ("", "flickr30k", "flickr"),
                  "from": f"{TOKENS.filename} from {_FORM} (by request)"}, layouts=_FULL_LAYOUTS),
        Protocol("karpathy-test", ("karpathy-splits",), 1000, 5000, "karpathy-json", "raw",
                 "dataset_flickr30k.json entries with split == 'test' (CLIP_benchmark, LLM2CLIP, HiMo, FG-CLIP 2)",
                 {**_KARPATHY, "split": "test"}, aliases=("1k",), layouts=_KARPATHY_TEST_LAYOUTS),
        Protocol("karpathy-val", ("flair-splits",), 1014, 5070, "karpathy-json", "raw",
                 "dataset_flickr30k.json entries with split == 'val' (FLAIR's default, --flickr-val-or-test val)",
                 {**_KARPATHY, "split": "val"}),
    ),
    default_protocol="full",
    resources=(TOKENS, IMAGES, KARPATHY),
    notes="Three different sets share the name: full-set R@1 is ~30 points below 1k-test R@1 for the same model.",
)
