"""DCI (Densely Captioned Images), Meta — CC BY-NC; the photos are SA-1B's ``sa_000138`` under SA-1B's terms."""

from hnbench.data.benchmarks.protocol import Protocol
from hnbench.data.benchmarks.spec import GOAL_DCI_TEST, GOAL_DCI_TRAIN, BenchmarkSpec, Resource, goal_resource

SA1B = Resource(
    "sa_000138.tar", extract=True, members="*.jpg", into="densely_captioned_images/photos",
    manual="SA-1B's license must be accepted first: download sa_000138.tar from "
           "https://ai.meta.com/datasets/segment-anything-downloads/ and pass it with --local sa_000138.tar",
)
# The checksum facebookresearch/DCI's dataset/densely_captioned_images/dataset/scripts/download.py checks since
# its commit 5e893931 (3 June 2024, "Update download.py checksum"); the one before it names the older archive.
DCI_ARCHIVE = Resource(
    "dci.tar.gz", url="https://dl.fbaipublicfiles.com/densely_captioned_images/dci.tar.gz",
    sha256="d865c244150168d3f25daaad0bf5b70b2123cf3e83ca7b0e207d5b26943c5fc7", extract=True,
    superseded=(("9caff10cb6324c801d9020638f49925f04de87d897ca8614c599f3c43bef3aeb",
                 "the dci.tar.gz DCI's download script checked before its commit 5e893931 (June 2024)"),),
)
DCI_RESOURCES = (
    DCI_ARCHIVE,
    SA1B, goal_resource(GOAL_DCI_TEST), goal_resource(GOAL_DCI_TRAIN),
)

SPEC = BenchmarkSpec(
    name="dci",
    title="DCI: Densely Captioned Images",
    publisher="Meta (facebookresearch/DCI)",
    homepage="https://github.com/facebookresearch/DCI",
    license="CC BY-NC 4.0 (annotations); images: SA-1B terms",
    # As facebookresearch/DCI's README gives it.
    citation="""@InProceedings{Urbanek_2024_CVPR,
    author    = {Urbanek, Jack and Bordes, Florian and Astolfi, Pietro and Williamson, Mary and Sharma, Vasu and Romero-Soriano, Adriana},
    title     = {A Picture is Worth More Than 77 Text Tokens: Evaluating CLIP-Style Models on Dense Captions},
    booktitle = {Proceedings of the IEEE/CVF Conference on Computer Vision and Pattern Recognition (CVPR)},
    month     = {June},
    year      = {2024},
    pages     = {26700-26709}
}""",
    layout="densely_captioned_images/ with annotations/<unit id>-data.json, complete/ (the same files plus "
           "summaries, negatives, clip_scores), photos/ and splits.json",
    protocols=(
        Protocol("full", ("zero-shot-splits",), 7805, 7805, "dci-splits", "short+extra",
                 "every annotation named in splits.json (annotations in no split are not read); caption "
                 "short_caption + '\\n' + extra_caption (DCI-full)",
                 aliases=("zero-shot",)),
        Protocol("full-sentences", ("zero-shot-splits", "lotlip-splits", "lotlip-10k", "flair-splits"), 7805, 7805, "dci-splits", "short+extra-sentences",
                 "as full, sentences split and re-joined with '. ' (LoTLIP, FLAIR)"),
        Protocol("goal", ("goal-splits",), 1999, 1999, "dci-lists", "extra",
                 "GOAL's DCI_test.json images; caption extra_caption (GOAL, HN-CLIP)", lists=(GOAL_DCI_TEST,)),
        Protocol("goal-train", ("train",), 5445, 5445, "dci-lists", "extra",
                 "GOAL's DCI_train_del_org.json images (fine-tuning); caption extra_caption",
                 lists=(GOAL_DCI_TRAIN,)),
    ),
    default_protocol="full",
    resources=DCI_RESOURCES,
    data_dir="dci",
    notes="dci.tar.gz holds the annotations only; the photos are SA-1B archive sa_000138 (license click-through). "
          "Annotation files are named after their crowdsourcing unit (<unit id>-data.json), not their photo: the "
          "goal protocols index them by their 'image' field.",
)
