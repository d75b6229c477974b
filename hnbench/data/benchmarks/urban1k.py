"""Urban-1K (released with Long-CLIP) — CC BY-NC 4.0. Test only."""

from hnbench.data.benchmarks.spec import BenchmarkSpec, Protocol, Resource

SPEC = BenchmarkSpec(
    name="urban1k",
    title="Urban-1K",
    publisher="Long-CLIP authors (Hugging Face BeichenZhang/Urban1k)",
    homepage="https://huggingface.co/datasets/BeichenZhang/Urban1k",
    license="CC BY-NC 4.0",
    citation="""@inproceedings{zhang2024longclip,
  title     = {Long-{CLIP}: Unlocking the Long-Text Capability of {CLIP}},
  author    = {Zhang, Beichen and Zhang, Pan and Dong, Xiaoyi and Zang, Yuhang and Wang, Jiaqi},
  booktitle = {ECCV},
  year      = {2024}
}""",
    layout="Urban1k/image/<k>.jpg and Urban1k/caption/<k>.txt (or image/ and caption/ directly)",
    protocols=(
        Protocol("test", ("zero-shot-splits", "goal-splits"), 1000, 1000, "urban1k-folders", "first-line",
                 "all 1,000 pairs, matched by file stem; caption = first line", aliases=("zero-shot", "goal")),
    ),
    default_protocol="test",
    resources=(Resource("Urban1k.zip", hf_repo="BeichenZhang/Urban1k", extract=True),),
)
