"""Long-DCI (TULIP, ICLR 2025): DCI's photos with ``extra_caption`` as the caption — CC BY-NC 4.0."""

from hnbench.data.benchmarks.dci import DCI_RESOURCES
from hnbench.data.benchmarks.spec import GOAL_DCI_TEST, GOAL_DCI_TRAIN, BenchmarkSpec, Protocol, Resource

SPEC = BenchmarkSpec(
    name="long-dci",
    title="Long-DCI (TULIP)",
    publisher="TULIP authors (Hugging Face mderakhshani/Long-DCI), built on Meta's DCI",
    homepage="https://huggingface.co/datasets/mderakhshani/Long-DCI",
    license="CC BY-NC 4.0; images: SA-1B terms",
    citation="""@inproceedings{najdenkoska2025tulip,
  title     = {{TULIP}: Token-length Upgraded {CLIP}},
  author    = {Najdenkoska, Ivona and Derakhshani, Mohammad Mahdi and Asano, Yuki M. and van Noord, Nanne and
               Worring, Marcel and Snoek, Cees G. M.},
  booktitle = {ICLR},
  year      = {2025}
}""",
    layout="dci_long.csv (filepath, title) and DCI's photos (densely_captioned_images/photos/ or photos/); "
           "without the CSV, the DCI release to rebuild it from",
    protocols=(
        Protocol("tulip", ("zero-shot-splits",), 7602, 7602, "long-dci", "extra",
                 "TULIP's list: every DCI annotation in sorted order, extra_caption, empty ones dropped",
                 aliases=("zero-shot",)),
        Protocol("goal", ("goal-splits",), 7444, 7444, "dci-lists", "extra",
                 "GOAL's DCI train + test lists (5,445 + 1,999), extra_caption (HN-CLIP)",
                 lists=(GOAL_DCI_TRAIN, GOAL_DCI_TEST)),
    ),
    default_protocol="tulip",
    resources=(Resource("dci_long.csv", hf_repo="mderakhshani/Long-DCI"), *DCI_RESOURCES),
    data_dir="dci",
    notes="Sizes disagree: 7,805 (hub card), 7,602 (TULIP's construction: 203 empty extra captions dropped), "
          "7,444 (HN-CLIP 'following GOAL'). The goal protocol contains GOAL's DCI training images.",
)
