"""COCO Captions 5k: val2017 (the long-caption papers' "COCO") and Karpathy's test split — CC BY 4.0 annotations."""

from hnbench.data.benchmarks.protocol import Layout, Protocol
from hnbench.data.benchmarks.spec import BenchmarkSpec, Resource

_ZIPS = "http://images.cocodataset.org/zips"
ANNOTATIONS = Resource("annotations_trainval2017.zip", url="http://images.cocodataset.org/annotations/"
                       "annotations_trainval2017.zip", extract=True, members="captions_*2017.json", into="annotations")
VAL2017 = Resource("val2017.zip", url=f"{_ZIPS}/val2017.zip", extract=True)
# Karpathy's splits (cs.stanford.edu/people/karpathy/deepimagesent); only karpathy-test needs them
KARPATHY = Resource("caption_datasets.zip", url="https://cs.stanford.edu/people/karpathy/deepimagesent/"
                    "caption_datasets.zip", extract=True, members="dataset_*.json", optional=True)
VAL2014 = Resource("val2014.zip", url=f"{_ZIPS}/val2014.zip", extract=True, optional=True)

_VAL2017 = {"file": "captions_val2017.json", "dirs": ("annotations", "coco/annotations", ""),
            "from": f"{ANNOTATIONS.filename} ({ANNOTATIONS.url})", "image_dirs": ("val2017", "images/val2017"),
            "images_from": f"the images are {VAL2017.filename} ({VAL2017.url}), unpacked into val2017/"}

# the other release files of the Karpathy 5k test: CLIP_benchmark's (COCO format) and LLM2CLIP's (BLIP's list)
RETRIEVAL_ANNOTATIONS = "https://github.com/mehdidc/retrieval_annotations/releases/download/1.0.0"
SFR_DATASETS = "https://storage.googleapis.com/sfr-vision-language-research/datasets"
_KARPATHY_TEST_LAYOUTS = (
    Layout("coco-captions-json", {"file": "coco_test_karpathy.json", "dirs": ("", "annotations", "karpathy"),
                                  "from": f"CLIP_benchmark's annotations ({RETRIEVAL_ANNOTATIONS}/coco_test_karpathy.json)"}),
    Layout("caption-list-json", {"file": "coco_karpathy_test.json", "dirs": ("", "annotations", "coco/annotations"),
                                 "from": f"LLM2CLIP's setup_eval_datasets.sh ({SFR_DATASETS}/coco_karpathy_test.json)"}),
)

SPEC = BenchmarkSpec(
    name="coco",
    title="COCO Captions (5k retrieval: val2017, Karpathy test)",
    publisher="COCO Consortium (cocodataset.org); Karpathy & Fei-Fei's splits",
    homepage="https://cocodataset.org",
    license="CC BY 4.0 (annotations); images: Flickr terms of use",
    # As cocodataset.org's citation gives the COCO paper (ECCV 2014).
    citation="""@inproceedings{lin2014microsoft,
  title={Microsoft {COCO}: Common Objects in Context},
  author={Lin, Tsung-Yi and Maire, Michael and Belongie, Serge and Hays, James and Perona, Pietro and Ramanan, Deva and
    Doll{\\'a}r, Piotr and Zitnick, C. Lawrence},
  booktitle={ECCV},
  year={2014}
}""",
    layout="annotations/captions_val2017.json and val2017/ (val2017.zip); for karpathy-test dataset_coco.json "
           "(caption_datasets.zip) and val2014/ (val2014.zip)",
    protocols=(
        Protocol("val2017", ("longclip-splits", "tulip-splits"), 5000, 25000, "coco-captions-json", "raw",
                 "val2017's 5,000 images in id order, the first 5 captions of each in annotation order "
                 "(torchvision CocoCaptions, captions[0:5]: Long-CLIP, TULIP, FineLIP, HiMo, FG-CLIP)",
                 {**_VAL2017, "first_k": 5}, aliases=("val2017-first5",)),
        Protocol("val2017-all", ("flair-splits",), 5000, 25014, "coco-captions-json", "raw",
                 "val2017's 5,000 images with all their captions (4,987 × 5, 12 × 6, 1 × 7; FLAIR's read_coco_pairs)",
                 _VAL2017),
        Protocol("karpathy-test", ("karpathy-splits",), 5000, 25010, "karpathy-json", "raw",
                 "dataset_coco.json entries with split == 'test' (val2014 images; restval is training data), "
                 "every sentences[].raw (CLIP_benchmark, LLM2CLIP)",
                 {"file": "dataset_coco.json", "dirs": ("", "annotations", "karpathy", "caption_datasets"),
                  "from": f"Karpathy's {KARPATHY.filename} ({KARPATHY.url})", "split": "test",
                  "image_dirs": ("val2014", "images/val2014"),
                  "images_from": f"the images are COCO val2014 ({VAL2014.url}), unpacked into val2014/"},
                 layouts=_KARPATHY_TEST_LAYOUTS),
    ),
    default_protocol="val2017",
    resources=(ANNOTATIONS, VAL2017, KARPATHY, VAL2014),
    notes="'COCO 5k' names two different image sets: val2017 (most long-caption papers) and Karpathy's test "
          "split of val2014 (CLIP_benchmark, LLM2CLIP). Short captions: a regression check for long-caption models.",
)
