"""Long-DCI (TULIP, ICLR 2025): DCI's photos with ``extra_caption`` as the caption — CC BY-NC 4.0."""

from hnbench.data.benchmarks.dci import DCI_RESOURCES
from hnbench.data.benchmarks.protocol import Protocol
from hnbench.data.benchmarks.spec import GOAL_DCI_TEST, GOAL_DCI_TRAIN, BenchmarkSpec, HubIds, Resource

CAPTIONS = Resource("dci_long.csv", hf_repo="mderakhshani/Long-DCI")

SPEC = BenchmarkSpec(
    name="long-dci",
    title="Long-DCI (TULIP)",
    publisher="TULIP authors (Hugging Face mderakhshani/Long-DCI), built on Meta's DCI",
    homepage="https://huggingface.co/datasets/mderakhshani/Long-DCI",
    license="CC BY-NC 4.0; images: SA-1B terms",
    # As TULIP's README gives it (github.com/ivonajdenkoska/tulip); the hub card was not checked.
    citation="""@inproceedings{
 najdenkoska2024tulip,
 title={{TULIP}: Token-length Upgraded {CLIP}},
 author={Najdenkoska, Ivona and Derakhshani, Mohammad Mahdi and
  Asano, Yuki M and van Noord, Nanne and Worring, Marcel and Snoek,
  Cees GM},
 booktitle={The Thirteenth International Conference on Learning Representations (ICLR)},
 year={2025},
}""",
    layout="dci_long.csv (filepath, title) and DCI's photos (densely_captioned_images/photos/ or photos/); "
           "without the CSV, the DCI release to rebuild it from",
    protocols=(
        Protocol("tulip", ("zero-shot-splits", "tulip-splits"), 7602, 7602, "long-dci", "extra",
                 "TULIP's list: every annotations/*.json in sorted order (split or not), extra_caption; only "
                 "zero-length ones dropped (whitespace-only ones kept, as TULIP's len(...) == 0)",
                 aliases=("zero-shot",), keep_empty=True),
        Protocol("goal", ("goal-splits",), 7444, 7444, "dci-lists", "extra",
                 "GOAL's DCI train + test lists (5,445 + 1,999), extra_caption (HN-CLIP)",
                 lists=(GOAL_DCI_TRAIN, GOAL_DCI_TEST)),
    ),
    default_protocol="tulip",
    resources=(CAPTIONS, *DCI_RESOURCES),
    hub=HubIds(dataset=CAPTIONS.hf_repo),
    data_dir="dci",
    notes="Sizes disagree: 7,805 (hub card: DCI's image count), 7,602 (TULIP's construction on the DCI release: "
          "7,805 annotations less 203 with a zero-length extra_caption, per hnbench's benchmark notes; not counted "
          "by hnbench itself), 7,444 (HN-CLIP 'following GOAL'). The goal protocol contains GOAL's DCI training images.",
)
