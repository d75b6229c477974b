"""Urban-1K (released with Long-CLIP) — CC BY-NC 4.0. Test only."""

from hnbench.data.benchmarks.protocol import Protocol
from hnbench.data.benchmarks.spec import BenchmarkSpec, HubIds, Resource

RELEASE = Resource("Urban1k.zip", hf_repo="BeichenZhang/Urban1k", extract=True)

SPEC = BenchmarkSpec(
    name="urban1k",
    title="Urban-1K",
    publisher="Long-CLIP authors (Hugging Face BeichenZhang/Urban1k)",
    homepage="https://huggingface.co/datasets/BeichenZhang/Urban1k",
    license="CC BY-NC 4.0",
    # Long-CLIP's README (github.com/beichenzbc/Long-CLIP), which releases Urban-1K; the paper is ECCV 2024.
    citation="""@article{zhang2024longclip,
        title={Long-CLIP: Unlocking the Long-Text Capability of CLIP},
        author={Beichen Zhang and Pan Zhang and Xiaoyi Dong and Yuhang Zang and Jiaqi Wang},
        journal={arXiv preprint arXiv:2403.15378},
        year={2024}
}""",
    layout="Urban1k/image/<k>.jpg and Urban1k/caption/<k>.txt (or image/ and caption/ directly)",
    protocols=(
        Protocol("test", ("zero-shot-splits", "goal-splits"), 1000, 1000, "urban1k-folders", "first-nonempty-line",
                 "all 1,000 pairs, matched by file stem; caption = the file's first non-blank line (as GOAL's list)",
                 aliases=("zero-shot", "goal")),
        Protocol("longclip", ("zero-shot-splits", "longclip-splits", "tulip-splits"), 1000, 1000, "urban1k-folders", "longclip-first-line",
                 "as test, caption = readlines()[0] as Long-CLIP's and TULIP's loaders read it: 592.txt starts "
                 "with a blank line, so one query is empty", keep_empty=True),
        Protocol("lotlip", ("lotlip-splits",), 1000, 1000, "urban1k-folders", "longclip-first-line-sentences",
                 "as longclip, the line's sentences split on newlines / </s> / . and re-joined with '. ' (LoTLIP's "
                 "dataloaders/urban1k.py); 592.txt's query stays empty", keep_empty=True),
    ),
    default_protocol="test",
    resources=(RELEASE,),
    hub=HubIds(dataset=RELEASE.hf_repo),
)
