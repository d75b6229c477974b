"""DCI (Densely Captioned Images), Meta — CC BY-NC; the photos are SA-1B's ``sa_000138`` under SA-1B's terms."""

from hnbench.data.benchmarks.spec import (
    GOAL_DCI_TEST,
    GOAL_DCI_TRAIN,
    BenchmarkSpec,
    Protocol,
    Resource,
    goal_resource,
)

SA1B = Resource(
    "sa_000138.tar", extract=True, members="*.jpg", into="densely_captioned_images/photos",
    manual="SA-1B's license must be accepted first: download sa_000138.tar from "
           "https://ai.meta.com/datasets/segment-anything-downloads/ and pass it with --local sa_000138.tar",
)
DCI_RESOURCES = (
    Resource("dci.tar.gz", url="https://dl.fbaipublicfiles.com/densely_captioned_images/dci.tar.gz",
             sha256="9caff10cb6324c801d9020638f49925f04de87d897ca8614c599f3c43bef3aeb", extract=True),
    SA1B, goal_resource(GOAL_DCI_TEST), goal_resource(GOAL_DCI_TRAIN),
)

SPEC = BenchmarkSpec(
    name="dci",
    title="DCI: Densely Captioned Images",
    publisher="Meta (facebookresearch/DCI)",
    homepage="https://github.com/facebookresearch/DCI",
    license="CC BY-NC 4.0 (annotations); images: SA-1B terms",
    citation="""@inproceedings{urbanek2024picture,
  title     = {A Picture is Worth More Than 77 Text Tokens: Evaluating {CLIP}-Style Models on Dense Captions},
  author    = {Urbanek, Jack and Bordes, Florian and Astolfi, Pietro and Williamson, Mary and Sharma, Vasu and
               Romero-Soriano, Adriana},
  booktitle = {CVPR},
  year      = {2024}
}""",
    layout="densely_captioned_images/ with annotations/*.json, photos/ and splits.json",
    protocols=(
        Protocol("full", ("zero-shot-splits",), 7805, 7805, "dci-splits", "short+extra",
                 "all images of splits.json; caption short_caption + '\\n' + extra_caption (DCI-full)",
                 aliases=("zero-shot",)),
        Protocol("full-sentences", ("zero-shot-splits",), 7805, 7805, "dci-splits", "short+extra-sentences",
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
    notes="dci.tar.gz holds the annotations only; the photos are SA-1B archive sa_000138 (license click-through).",
)
