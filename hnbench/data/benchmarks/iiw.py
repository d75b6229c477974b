"""IIW (ImageInWords) retrieval: 612 hyper-detailed descriptions on DOCCI, DOCCI-AAR and DCI images — CC BY 4.0."""

from hnbench.data.benchmarks.dci import SA1B as DCI_PHOTOS
from hnbench.data.benchmarks.protocol import Protocol
from hnbench.data.benchmarks.spec import BenchmarkSpec, Resource

IIW_COMMIT = "96d393777e2528becd8a7afa1389eb4b65084793"  # google/imageinwords, the snapshot the counts come from
FLAIR_COMMIT = "0f9ce05886d1ee0aa2c628653104cce77a1fff14"  # ExplainableML/flair
_DOCCI = "https://storage.googleapis.com/docci/data"
IIW_REPO = Resource(f"{IIW_COMMIT}.zip", url=f"https://github.com/google/imageinwords/archive/{IIW_COMMIT}.zip",
                    extract=True, into="imageinwords")
FLAIR_FG = Resource("test_annotations.json", url=f"https://raw.githubusercontent.com/ExplainableML/flair/{FLAIR_COMMIT}/"
                    "datasets/imageinwords/test_annotations.json",
                    sha256="e8d302f5e483134324ed473b70eeb73ec97bb92e04db3d996e7ba127f526770e", optional=True)
DOCCI_IMAGES = Resource("docci_images.tar.gz", url=f"{_DOCCI}/docci_images.tar.gz", extract=True, into="docci")
DOCCI_AAR = Resource("docci_images_aar.tar.gz", url=f"{_DOCCI}/docci_images_aar.tar.gz", extract=True, into="docci_aar")

_DIRS = ("", "datasets", f"imageinwords/imageinwords-{IIW_COMMIT}/datasets", "imageinwords/datasets")
_SUBSETS = (("DOCCI_Test", "docci"), ("IIW-400", "docci_aar"), ("DCI_Test", "dci"))
_IMAGES = ("the images are DOCCI's test images (docci_images.tar.gz), DOCCI-AAR's (docci_images_aar.tar.gz; "
           f"both {_DOCCI}/) and DCI's photos (SA-1B sa_000138.tar); put them anywhere under the data root "
           "(LoTLIP: docci/, docci_aar/, dci/)")
_612 = {**{name: f"{name}/data.jsonl" for name, _ in _SUBSETS}, "subsets": _SUBSETS, "dirs": _DIRS,
        "from": f"GitHub google/imageinwords, datasets/ (commit {IIW_COMMIT[:7]}: {IIW_REPO.url})", "images_from": _IMAGES}

SPEC = BenchmarkSpec(
    name="iiw",
    title="IIW: ImageInWords retrieval (IIW-400, DCI_Test, DOCCI_Test)",
    publisher="Google (github.com/google/imageinwords)",
    homepage="https://github.com/google/imageinwords",
    license="CC BY 4.0 (descriptions); images: DOCCI CC BY 4.0, DCI's photos SA-1B terms",
    # As google/imageinwords' CITATION.cff gives it (preferred-citation).
    citation="""@misc{garg2024imageinwords,
  title={ImageInWords: Unlocking Hyper-Detailed Image Descriptions},
  author={Roopal Garg and Andrea Burns and Burcu Karagol Ayan and Yonatan Bitton and Ceslee Montgomery and
    Yasumasa Onoe and Andrew Bunner and Ranjay Krishna and Jason Baldridge and Radu Soricut},
  year={2024},
  eprint={2405.02793},
  archivePrefix={arXiv},
  primaryClass={cs.CV}
}""",
    layout="{DOCCI_Test,IIW-400,DCI_Test}/data.jsonl (google/imageinwords datasets/) and the images anywhere below "
           "the data root (LoTLIP: docci/, docci_aar/, dci/); fine-grained: FLAIR's test_annotations.json",
    protocols=(
        Protocol("612", ("lotlip-splits", "lotlip-10k"), 612, 612, "iiw-jsonl", "sentences",
                 "DOCCI_Test, IIW-400, DCI_Test in that order, 612 pairs; caption IIW, sentences re-joined with '. ' "
                 "(LoTLIP's iiw_retrieval.py, FLAIR without fine-grained)", _612, aliases=("lotlip-612",)),
        Protocol("612-raw", (), 612, 612, "iiw-jsonl", "raw", "the same 612 pairs, the IIW description as stored",
                 _612, aliases=("raw-612",)),
        Protocol("fine-grained", ("flair-splits",), 612, 6204, "iiw-flair-json", "raw",
                 "FLAIR's test_annotations.json: 6,204 sentence captions on the same 612 images, grouped by image "
                 "(FLAIR's default, --use-finegrained-iiw)",
                 {"file": "test_annotations.json", "dirs": ("", "imageinwords", "flair"),
                  "from": f"GitHub ExplainableML/flair, datasets/imageinwords/ ({FLAIR_FG.url})",
                  "images_from": _IMAGES}, aliases=("flair-fg",)),
    ),
    default_protocol="612",
    resources=(IIW_REPO, FLAIR_FG, DOCCI_IMAGES, DOCCI_AAR, DCI_PHOTOS),
    notes="43% of the 612 captions are over 248 CLIP tokens (suite notes): the longest captions in use. Its DOCCI_Test "
          "and DCI_Test images are also in DOCCI test and DCI-full.",
)
