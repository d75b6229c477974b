"""SugarCrepe (RAIVNLab, MIT) and SugarCrepe++ (CC BY 4.0): one image, a positive and hard negative caption(s).

**SugarCrepe** (``sugarcrepe``): seven JSON files ``data/<subset>.json``, each one object keyed by a decimal string
(swap_obj's keys run 0–245 with ``"108"`` missing: records are iterated, never ``range(n)``), each value exactly
``filename`` (a bare COCO val2017 name), ``caption``, ``negative_caption``; images in ``val2017/``. The official
``main_eval.py``: per subset ``acc = mean 1[s(I, pos) > s(I, neg)]`` (strict: a tie is wrong), no average.

**SugarCrepe++** (``sugarcrepe-pp``): five JSON *lists* ``data/<subset>.json`` (no ``add_*``), every record exactly
``id`` (its position), ``filename``, ``caption`` (P1), ``caption2`` (P2), ``negative_caption`` (N); images flat in
``images/``. Scored by :func:`hnbench.metrics.choice.sugarcrepe_pp_outcomes` (ITT the headline, TOT beside it). The
two swap_obj records whose caption equals their negative are kept (they score wrong on ITT and P1-Neg whatever
the model, as the official script scores them).

Counts and sha256s were taken from the repositories at the commits pinned below (``sugar-crepe@0047054b``,
``scpp@c083bbf0``).
"""

from __future__ import annotations

import re
from pathlib import Path

from hnbench.data.benchmarks.protocol import LoadContext
from hnbench.data.benchmarks.spec import BenchmarkSpec, Resource
from hnbench.data.choices import ChoiceBuilder, ChoiceProtocol, choice_protocol, image_ref, read_json_file
from hnbench.errors import DataError
from hnbench.metrics.choice import Scoring

SC_REPO, SC_COMMIT = "RAIVNLab/sugar-crepe", "0047054b243992f0fad63d6f64f7544862daf846"
SCPP_REPO, SCPP_COMMIT = "Sri-Harsha/scpp", "c083bbf039a5ca215acaf25e7ee736d2ea6f3864"

# subset → (records, sha256 of data/<subset>.json at SC_COMMIT)
SUGARCREPE_FILES = {
    "add_att": (692, "012d88d729693d193760e6f3393b06a1cf874380a9db0062e937201199fe044d"),
    "add_obj": (2062, "1b9d76b93139a937b8dc1ada92a4f05ecc821bb3c291d752428bafadd4bb0682"),
    "replace_att": (788, "9fe55fd4c0a9ad1f85d486d9f6d0215b41f867eb025026e7f7b5ce44352545ee"),
    "replace_obj": (1652, "9d299600639947e9d15281a9ded1382b376cf4ea088a8d08a1314bfe76e81898"),
    "replace_rel": (1406, "356bcc2fc4c6aed3f4d9fd50acc58489bb1fe70c28791f9368d4cbf9ea39cdc9"),
    "swap_att": (666, "7a7ce04e5c4c80412b48c6f0c1347fb1a2f5d54c0be6aa429b64d390e442f8d0"),
    "swap_obj": (245, "073cdb8e253d053614e80710834d9773b09dbc1dd0a412f6f9492262caa1dcad"),
}
# subset → (records, sha256 of data/<subset>.json at SCPP_COMMIT)
SUGARCREPE_PP_FILES = {
    "replace_att": (788, "6826413592894754eeca02aeebbcbbc8b95a7456998abcc714e71c033ce6fe87"),
    "replace_obj": (1652, "5c6dc499ec8f511a8aa4ec1b7b5eb0eca90317488abe36ec39573355e2d361ab"),
    "replace_rel": (1406, "040fb95d3f0619bf515db60879e99709a87a5e9b4f524ec3403b127243480fd4"),
    "swap_att": (666, "450d0fd9fcad3e6f44950dc634e7f901ab1c6d9c60a569ade5ae8ffb3d203ad8"),
    "swap_obj": (245, "5f33cae824de431a7ecd3c5de6301f689815f9497aa36d96b154bbaf117b201b"),
}
COCO_2017_NAME = re.compile(r"\d{12}\.jpg")
ROLES = ("caption", "negative_caption")
PP_ROLES = ("caption", "caption2", "negative_caption")
OFFICIAL = Scoring("option", ROLES, "caption", "strict_gt")
MTEB = Scoring("option", ROLES, "caption", "argmax_first")
PP = Scoring("sugarcrepe-pp")
VAL2017_ZIP = "http://images.cocodataset.org/zips/val2017.zip"


def _raw(repo: str, commit: str, subset: str) -> str:
    return f"https://raw.githubusercontent.com/{repo}/{commit}/data/{subset}.json"


def _where(repo: str, commit: str, subset: str) -> str:
    return f"GitHub {repo}, data/{subset}.json at {commit[:8]}"


def _image_dir(root: Path, folder: str, name: str) -> Path:
    """``root/folder`` holding COCO 2017 images; COCO 2014 images (``COCO_val2014_…``) are refused, one line."""
    base = root / folder
    if not base.is_dir():
        other = "" if not (root / "val2014").is_dir() else (
            f"; {root / 'val2014'} holds COCO 2014 images, but {name} names COCO 2017 val images")
        raise DataError(f"{name}: no {folder}/ under {root} (COCO 2017 val images, {VAL2017_ZIP}){other}")
    for k, entry in enumerate(base.iterdir()):
        if entry.name.startswith("COCO_val2014_") or entry.name.startswith("COCO_train2014_"):
            raise DataError(f"{name}: {base} holds COCO 2014 images ({entry.name}); {name} names COCO 2017 val "
                            f"images (000000xxxxxx.jpg, {VAL2017_ZIP})")
        if k >= 20:
            break
    return base


def read_sugarcrepe(root: Path, proto: ChoiceProtocol, ctx: LoadContext) -> ChoiceBuilder:
    """SugarCrepe's subset files the protocol reads (``proto.counts``), every record of each (see the module)."""
    images = _image_dir(root, "val2017", ctx.name)
    b = ChoiceBuilder(ctx.name, ("image",), ROLES, ctx)
    for subset in proto.counts:
        path = root / "data" / f"{subset}.json"
        data = read_json_file(path, ctx.name, f"SugarCrepe's {subset}.json, {_raw(SC_REPO, SC_COMMIT, subset)}")
        b.file(path, SUGARCREPE_FILES[subset][1], _where(SC_REPO, SC_COMMIT, subset))
        if not isinstance(data, dict):
            raise DataError(f"{ctx.name}: {path} is a JSON {type(data).__name__}, not SugarCrepe's object keyed by "
                            "record number")
        for key, rec in data.items():  # keys need not be contiguous (swap_obj has no "108")
            where = f"{path.name}[{key!r}]"
            if not isinstance(rec, dict):
                b.invalid(where, f"a {type(rec).__name__}, not a record", "malformed record")
                continue
            texts = [b.check_text(where, rec, k) for k in ROLES]
            name = rec.get("filename")
            if not isinstance(name, str) or not COCO_2017_NAME.fullmatch(name):
                b.invalid(where, f"filename {name!r} is not a COCO 2017 val name (000000xxxxxx.jpg)", "bad filename")
                continue
            if texts[0] is None or texts[1] is None:
                continue
            if texts[0] == texts[1]:
                b.invalid(where, "caption equals negative_caption", "caption equals negative")
                continue
            b.add(f"{subset}/{key}", [image_ref(root, images, name, where, ctx)], [texts[0], texts[1]], subset,
                  {"subset": subset})
    return b


def read_sugarcrepe_pp(root: Path, proto: ChoiceProtocol, ctx: LoadContext) -> ChoiceBuilder:
    """SugarCrepe++'s subset files (see the module); a caption equal to its negative is kept and counted."""
    images = root / "images"
    if not images.is_dir():
        raise DataError(f"{ctx.name}: no images/ under {root} (COCO 2017 val images, flat, as scpp's "
                        f"VLMs/download_coco_images.sh puts them: {VAL2017_ZIP})")
    b = ChoiceBuilder(ctx.name, ("image",), PP_ROLES, ctx)
    same: list[str] = []
    for subset in proto.counts:
        path = root / "data" / f"{subset}.json"
        data = read_json_file(path, ctx.name, f"SugarCrepe++'s {subset}.json, {_raw(SCPP_REPO, SCPP_COMMIT, subset)}")
        b.file(path, SUGARCREPE_PP_FILES[subset][1], _where(SCPP_REPO, SCPP_COMMIT, subset))
        if not isinstance(data, list):
            raise DataError(f"{ctx.name}: {path} is a JSON {type(data).__name__}, not SugarCrepe++'s list of records")
        for k, rec in enumerate(data):
            where = f"{path.name}[{k}]"
            if not isinstance(rec, dict):
                b.invalid(where, f"a {type(rec).__name__}, not a record", "malformed record")
                continue
            rid = rec.get("id")
            if isinstance(rid, bool) or not isinstance(rid, int) or rid != k:
                b.refuse(where, f"id {rid!r} is not its position {k}")
                continue
            texts = [b.check_text(where, rec, key) for key in PP_ROLES]
            name = rec.get("filename")
            if not isinstance(name, str) or not name:
                b.invalid(where, "no 'filename'", "missing field")
                continue
            if any(t is None for t in texts):
                continue
            item = f"{subset}/{k}"
            if texts[0] == texts[2]:
                same.append(item)
            b.add(item, [image_ref(root, images, name, where, ctx)], [str(t) for t in texts], subset,
                  {"subset": subset})
    b.meta["caption_equals_negative"] = same  # scored wrong on ITT and P1-Neg whatever the model (kept, as released)
    return b


def _sc_protocols() -> tuple[ChoiceProtocol, ...]:
    reader = "hnbench.data.benchmarks.sugarcrepe:read_sugarcrepe"
    official = tuple(
        choice_protocol(s.replace("_", "-"), reader, OFFICIAL, {s: n}, f"{s}.json: 1[s(I, caption) > "
                        "s(I, negative_caption)] (strict, ties wrong), the mean over its records (main_eval.py)")
        for s, (n, _) in SUGARCREPE_FILES.items())
    mteb = choice_protocol(
        "mteb", reader, MTEB, {s: n for s, (n, _) in SUGARCREPE_FILES.items()},
        "MTEB's SugarCrepe: the seven subsets pooled into one set of 7,511, argmax over [caption, negative_caption] "
        "(a tie counts as right), text_acc; per-subset accuracies beside it", breakdown=("subset",), official=False)
    return (*official, mteb)


def _pp_protocols() -> tuple[ChoiceProtocol, ...]:
    reader = "hnbench.data.benchmarks.sugarcrepe:read_sugarcrepe_pp"
    return tuple(choice_protocol(s.replace("_", "-"), reader, PP, {s: n},
                                 f"{s}.json: ITT = 1[s(I,P1) > s(I,N) ∧ s(I,P2) > s(I,N)] (headline) and TOT = "
                                 "1[s(P1,P2) > s(P1,N) ∧ s(P1,P2) > s(P2,N)], strict (test_Variants_CLIP.py)")
                 for s, (n, _) in SUGARCREPE_PP_FILES.items())


def _json_resources(repo: str, commit: str, files: dict[str, tuple[int, str]]) -> tuple[Resource, ...]:
    return tuple(Resource(f"{s}.json", url=_raw(repo, commit, s), sha256=sha, into="data")
                 for s, (_, sha) in files.items())


SPEC = BenchmarkSpec(
    name="sugarcrepe",
    title="SugarCrepe: fixing hackable benchmarks for vision-language compositionality",
    publisher="RAIVN Lab, University of Washington",
    homepage=f"https://github.com/{SC_REPO}",
    license="MIT (annotations); images: COCO terms of use",
    # As the repository's README gives it (sugar-crepe@0047054b).
    citation="""@inproceedings{hsieh2023sugarcrepe,
  title={SugarCrepe: Fixing Hackable Benchmarks for Vision-Language Compositionality},
  author={Hsieh, Cheng-Yu and Zhang, Jieyu and Ma, Zixian and Kembhavi, Aniruddha and Krishna, Ranjay},
  booktitle={Thirty-Seventh Conference on Neural Information Processing Systems Datasets and Benchmarks Track},
  year={2023}
}""",
    layout="data/<subset>.json (the seven subset files of RAIVNLab/sugar-crepe) and val2017/ (COCO 2017 val images)",
    protocols=_sc_protocols(),
    default_protocol="add-att",
    resources=(*_json_resources(SC_REPO, SC_COMMIT, SUGARCREPE_FILES),
               Resource("val2017.zip", url=VAL2017_ZIP, extract=True)),
    notes="One protocol per subset (the official script reports seven numbers, no average); mteb pools them as "
          "MTEB does. Not SugarCrepe++'s files: those edited many captions.",
    task="choice",
)

SPEC_PP = BenchmarkSpec(
    name="sugarcrepe-pp",
    title="SugarCrepe++: vision-language model sensitivity to semantic and lexical alterations",
    publisher="Sri Harsha Dumpala et al. (Sri-Harsha/scpp; Hugging Face Aman-J/SugarCrepe_pp)",
    homepage=f"https://github.com/{SCPP_REPO}",
    license="CC BY 4.0 (data), MIT (code); images: COCO terms of use",
    # As the repository's README gives it (scpp@c083bbf0).
    citation="""@misc{dumpala2024sugarcrepe,
    title={SUGARCREPE++ Dataset: Vision-Language Model Sensitivity to Semantic and Lexical Alterations},
    author={Sri Harsha Dumpala and Aman Jaiswal and Chandramouli Sastry and Evangelos Milios and Sageev Oore and Hassan Sajjad},
    year={2024},
    eprint={2406.11171},
    archivePrefix={arXiv},
    primaryClass={cs.CV}
}""",
    layout="data/<subset>.json (the five subset files of Sri-Harsha/scpp) and images/ (COCO 2017 val images, flat)",
    protocols=_pp_protocols(),
    default_protocol="replace-att",
    resources=(*_json_resources(SCPP_REPO, SCPP_COMMIT, SUGARCREPE_PP_FILES),
               Resource("val2017.zip", url=VAL2017_ZIP, extract=True, members="*.jpg", into="images")),
    notes="ITT is the headline, TOT (text encoder only) beside it; 2 swap_obj records have caption == negative and "
          "are kept (scored wrong on ITT whatever the model).",
    task="choice",
)

