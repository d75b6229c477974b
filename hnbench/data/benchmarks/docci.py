"""DOCCI (Descriptions of Connected and Contrasting Images), Google — CC BY 4.0."""

from hnbench.data.benchmarks.protocol import Protocol
from hnbench.data.benchmarks.spec import BenchmarkSpec, Resource

_BASE = "https://storage.googleapis.com/docci/data"

SPEC = BenchmarkSpec(
    name="docci",
    title="DOCCI: Descriptions of Connected and Contrasting Images",
    publisher="Google",
    homepage="https://google.github.io/docci",
    license="CC BY 4.0",
    # As the release page (google.github.io/docci, repository google/docci) gives it.
    citation="""@inproceedings{OnoeDocci2024,
  author        = {Yasumasa Onoe and Sunayana Rane and Zachary Berger and Yonatan Bitton and Jaemin Cho and Roopal Garg and
    Alexander Ku and Zarana Parekh and Jordi Pont-Tuset and Garrett Tanzer and Su Wang and Jason Baldridge},
  title         = {{DOCCI: Descriptions of Connected and Contrasting Images}},
  booktitle     = {ECCV},
  year          = {2024}
}""",
    layout="docci_descriptions.jsonlines and images/ (test_00000.jpg, qual_test_00000.jpg, ...)",
    protocols=(
        Protocol("test", ("zero-shot-splits",), 5000, 5000, "docci-jsonlines", "description",
                 "split == 'test' (Long-CLIP, TULIP, FineLIP, SmartCLIP, ...)", {"splits": ("test",)},
                 aliases=("zero-shot",)),
        Protocol("test+qual", ("goal-splits",), 5100, 5100, "docci-jsonlines", "description",
                 "split in {test, qual_test} (GOAL, HN-CLIP)", {"splits": ("test", "qual_test")}, aliases=("goal",)),
        Protocol("train", ("train",), 9647, 9647, "docci-jsonlines", "description", "split == 'train'",
                 {"splits": ("train",)}),
    ),
    default_protocol="test",
    resources=(
        Resource("docci_descriptions.jsonlines", url=f"{_BASE}/docci_descriptions.jsonlines"),
        Resource("docci_images.tar.gz", url=f"{_BASE}/docci_images.tar.gz", extract=True),
    ),
    notes="The Hugging Face copy google/docci is a script dataset that recent `datasets` releases refuse; "
          "the raw jsonlines is the safe path. No checksums are published: download records the sha256.",
)
