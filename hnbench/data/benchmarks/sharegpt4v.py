"""ShareGPT4V-1k / -10k: the first records of ShareGPT4V's ShareCaptioner file, on SA-1B photos."""

from hnbench.data.benchmarks.protocol import Protocol
from hnbench.data.benchmarks.spec import BenchmarkSpec, HubIds, Resource

FULL_JSON = "share-captioner_coco_lcs_sam_1246k_1107.json"
SAM10K_JSON = "share4v_sam_10k.json"  # LoTLIP's and FLAIR's re-saved head of FULL_JSON ("the top 10k samples")
CAPTIONS = Resource(FULL_JSON, hf_repo="Lin-Chen/ShareGPT4V")
SA1B = Resource("sa_000000.tar", extract=True, members="*.jpg", into="sam/images", manual=(
    "SA-1B's license must be accepted first: download the tars sa_000000.tar to sa_000050.tar from "
    "https://ai.meta.com/datasets/segment-anything-downloads/ (or the Hugging Face mirror sailvideo/SA-1B) and unpack "
    "them anywhere under the data root; images are found by file name"))

_OPTIONS = {"file": (FULL_JSON, SAM10K_JSON), "dirs": ("", "sharegpt4v", "data"),
            "from": f"Hugging Face Lin-Chen/ShareGPT4V ({FULL_JSON}, ~1.5 GB), or LoTLIP's {SAM10K_JSON}",
            "images_from": "ShareGPT4V's images are SA-1B photos (tars sa_000000 to sa_000050, after accepting SA-1B's "
                           "terms at https://ai.meta.com/datasets/segment-anything-downloads/); unpack them anywhere "
                           "under the data root"}

SPEC = BenchmarkSpec(
    name="sharegpt4v",
    title="ShareGPT4V-1k / -10k (ShareCaptioner long captions on SA-1B)",
    publisher="ShareGPT4V authors (Hugging Face Lin-Chen/ShareGPT4V); images: Meta SA-1B",
    homepage="https://huggingface.co/datasets/Lin-Chen/ShareGPT4V",
    license="captions: research use per ShareGPT4V (not checked here); images: SA-1B terms",
    # As ShareGPT4V's README (github.com/ShareGPT4Omni/ShareGPT4V) gives it (ECCV 2024).
    citation="""@article{chen2023sharegpt4v,
  title={ShareGPT4V: Improving Large Multi-Modal Models with Better Captions},
  author={Chen, Lin and Li, Jisong and Dong, Xiaoyi and Zhang, Pan and He, Conghui and Wang, Jiaqi and Zhao, Feng and
    Lin, Dahua},
  journal={arXiv preprint arXiv:2311.12793},
  year={2023}
}""",
    layout=f"{FULL_JSON} (or {SAM10K_JSON}) and the SA-1B photos anywhere below the data root (sam/images/, "
           "sa_000000/ ... tar folders, or one flat folder)",
    protocols=(
        Protocol("1k", ("longclip-splits",), 1000, 1000, "sharegpt4v-json", "newline-space",
                 "the first 1,000 records (Long-CLIP's share4v_val_dataset; it trains on the rest); '\\n' → ' '",
                 {**_OPTIONS, "n": 1000}, aliases=("longclip-1k",), pairs_list="sharegpt4v-1k.tsv"),
        Protocol("1k-raw", ("tulip-splits",), 1000, 1000, "sharegpt4v-json", "raw",
                 "the first 1,000 records, caption as stored (TULIP's eval/sharegpt4v.py)",
                 {**_OPTIONS, "n": 1000}, aliases=("tulip-1k",), pairs_list="sharegpt4v-1k-raw.tsv"),
        Protocol("1k-sentences", ("lotlip-splits", "flair-splits"), 1000, 1000, "sharegpt4v-json", "sentences",
                 "the first 1,000 records, sentences split and re-joined with '. ' (LoTLIP, FLAIR)",
                 {**_OPTIONS, "n": 1000}, aliases=("lotlip-1k",), pairs_list="sharegpt4v-1k-sentences.tsv"),
        Protocol("10k-sentences", ("lotlip-10k",), 10000, 10000, "sharegpt4v-json", "sentences",
                 "the first 10,000 records, sentences re-joined (LoTLIP, FLAIR); overlaps the training data of "
                 "every ShareGPT4V-trained model", {**_OPTIONS, "n": 10000}, aliases=("lotlip-10k",),
                 pairs_list="sharegpt4v-10k-sentences.tsv"),
    ),
    default_protocol="1k",
    resources=(CAPTIONS, SA1B),
    hub=HubIds(dataset=CAPTIONS.hf_repo),  # the captions' repository (the images are SA-1B's)
    notes="Long-CLIP trains on records [1000:]: only the 1k set is held out from Long-CLIP-style training. Ground "
          "truth is by record index. The shipped pairs lists (hnbench/assets/pairs/) are pending: without one a set "
          "loads as 'unverified'.",
)
