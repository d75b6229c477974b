"""``hnbench export``: stored results of real tiny runs written as each publishing target's format and read back
with the targets' own readers where they exist offline (``huggingface_hub``'s model-card and ``.eval_results``
parsers; ``mteb`` when installed), every value traced to its result file through the export's manifest."""

from __future__ import annotations

import csv
import hashlib
import io
import json
import shutil
from pathlib import Path

import pytest
import yaml
from benchmark_fixtures import build_urban1k, jpeg
from conftest import make_pairs, snapshot, write_jsonl
from test_bench_coco import build_coco_val2017
from test_zeroshot import _class_folder

import hnbench
from hnbench.cli import main
from hnbench.errors import ConfigError
from hnbench.publish.mteb import check_task_result
from hnbench.results.record import read_result

COMMITTED = Path(__file__).resolve().parents[1] / "leaderboards" / "results" / "synthdense"
TAGGED = COMMITTED / "hnbench-tiny-synthdense-4e3c0724__synthdense-test__075c8027-4a86861d.json"
CHECKPOINT = COMMITTED / "hnbench-tiny-checkpoint-8f9c6681__synthdense-test__075c8027-4a86861d.json"
HOSTILE = '=SUM(1,2) <b>"q"</b>, # x: [y]'  # a data set's name from a user: a formula, markup, YAML syntax
URBAN_REVISION = "0123456789abcdef0123456789abcdef01234567"


def _karpathy(root: Path, dataset: str, folder: str, n: int) -> Path:
    """A Karpathy split file (``dataset_<dataset>.json``) with ``n`` test images of 5 captions and one train
    image, the images in ``folder``."""
    entries = []
    for i in range(n + 1):
        name = f"{1000 + i}.jpg"
        split = "train" if i == n else "test"
        entries.append({"filename": name, "filepath": folder, "imgid": i, "split": split, "cocoid": 1000 + i,
                        "sentences": [{"raw": f"picture {i} of a {['red', 'green', 'blue'][i % 3]} square, take {k}.",
                                       "tokens": ["a"], "imgid": i, "sentid": 5 * i + k} for k in range(5)]})
        jpeg(root / folder / name, i)
    (root / f"dataset_{dataset}.json").write_text(json.dumps({"images": entries, "dataset": dataset}))
    return root


@pytest.fixture(scope="module")
def stored(micro_config, tmp_path_factory) -> dict[str, Path]:
    """Real result files of one tiny model (one set of weights): Flickr30k and COCO Karpathy test, COCO val2017,
    Urban-1K (downloaded at a recorded Hub revision), the user's data under a hostile name, zero-shot
    classification and caption-length monotonicity; all in one folder."""
    from dataclasses import replace

    from hnbench.data.benchmarks import BENCHMARKS
    from hnbench.data.benchmarks.spec import DOWNLOAD_RECORD
    from hnbench.models import load_model

    root = tmp_path_factory.mktemp("export-data")
    out = root / "results"
    counts = {("flickr30k", "karpathy-test"): (6, 30), ("coco", "karpathy-test"): (4, 20),
              ("coco", "val2017"): (3, 15), ("urban1k", "test"): (11, 11)}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HNBENCH_CACHE", str(root / "cache"))
        for name in {b for b, _ in counts}:
            spec = BENCHMARKS[name]
            mp.setitem(BENCHMARKS, name, replace(spec, protocols=tuple(
                replace(p, n_images=counts[(name, p.name)][0], n_captions=counts[(name, p.name)][1])
                if (name, p.name) in counts else p for p in spec.protocols)))
        encoder = load_model("hnb-micro", model_config=str(micro_config))
        run = {"output_dir": out, "num_workers": 0, "progress": False, "use_cache": False}
        paths = {}
        flickr = _karpathy(root / "flickr", "flickr30k", "flickr30k-images", 6)
        paths["flickr"] = hnbench.evaluate(encoder, "flickr30k", data_root=flickr, protocol="karpathy-test", **run).path
        coco = _karpathy(root / "coco", "coco", "val2014", 4)
        paths["coco"] = hnbench.evaluate(encoder, "coco", data_root=coco, protocol="karpathy-test", **run).path
        val = build_coco_val2017(root / "val2017")
        paths["val2017"] = hnbench.evaluate(encoder, "coco", data_root=val, protocol="val2017", **run).path
        urban = root / "urban"
        build_urban1k(urban)
        (urban / DOWNLOAD_RECORD).write_text(json.dumps({"resources": {"Urban1k.zip": {
            "source": "https://huggingface.co/datasets/BeichenZhang/Urban1k (Urban1k.zip)", "revision": URBAN_REVISION,
            "sha256": "0" * 64}}}))
        paths["urban"] = hnbench.evaluate(encoder, "urban1k", data_root=urban, protocol="test", **run).path
        pairs = make_pairs(root / "own", n=8)
        manifest = write_jsonl(root / "own" / "m.jsonl", [{"image": p, "caption": c} for p, c in pairs])
        paths["own"] = hnbench.evaluate(encoder, manifest, name=HOSTILE, **run).path
        classes = _class_folder(root / "colours")
        paths["zeroshot"] = hnbench.evaluate(encoder, classes, task="zeroshot", **run).path
        rows = [{"image": p, "caption": f"{c}. It sits in a corner. The light is dim."} for p, c in pairs]
        prefixes = write_jsonl(root / "own" / "prefixes.jsonl", rows)
        paths["monotonicity"] = hnbench.evaluate(encoder, prefixes, task="monotonicity", **run).path
    return {"folder": out, **{k: Path(str(v)) for k, v in paths.items()}}


def _manifest(out: Path) -> dict:
    return json.loads((out / "hnbench-export.json").read_text())


def _field(result_path: str, field: str) -> float:
    """A result's value at ``metrics.<group>.<metric>`` (or ``model.n_params``)."""
    d = json.loads(Path(result_path).read_text())
    for part in field.split(".", 2):
        d = d[part]
    return d


def _check_traces(out: Path, transform) -> dict:
    """Every value the manifest lists: its input's sha256 is that of the result file's bytes, and it equals
    ``transform(value in the result, field)``; every file listed is there with its sha256. Returns the manifest."""
    m = _manifest(out)
    assert m["values"], "an export that wrote nothing"
    for value in m["values"]:
        source = m["inputs"][value["result"]]
        assert hashlib.sha256(Path(source["path"]).read_bytes()).hexdigest() == source["sha256"]
        expected = transform(_field(source["path"], value["field"]), value["field"])
        assert value["value"] == expected, (value, expected)
    for f in m["files"]:
        assert hashlib.sha256((out / f["path"]).read_bytes()).hexdigest() == f["sha256"]
    return m


def _reasons(m: dict) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for skip in m["not_exported"]:
        out.setdefault(Path(skip["result"]).name, []).append(f"{skip['what']}: {skip['reason']}")
    return out


# --- Hugging Face model card ----------------------------------------------------------------------------------
def test_a_model_card_parsed_by_huggingface_hub_returns_every_exported_value_and_survives_being_written_back(
        stored, tmp_path):
    from huggingface_hub import ModelCard, metadata_load

    out = tmp_path / "card"
    export = hnbench.export([stored["folder"]], "hf-model-index", out, source_url="https://example.org/runs/")
    assert export.files == [out / "README.md"] and export.card is None
    m = _check_traces(out, lambda v, field: round(v, 4 if field.endswith("MRR") else 2))
    card = ModelCard.load(out / "README.md")  # ValueError on a malformed model-index
    parsed = card.data.eval_results
    assert card.data.model_name == "hnb-micro (random-init)"
    written = metadata_load(out / "README.md")["model-index"]
    assert yaml.safe_load(card.data.to_yaml())["model-index"] == written  # nothing merged, dropped or nulled
    results = written[0]["results"]
    assert len(parsed) == sum(len(r["metrics"]) for r in results) == len(m["values"])
    # every exported value is one EvalResult, at the place the manifest says
    for value in m["values"]:
        i, j = (int(x) for x in value["where"].split("results[")[1].replace("].metrics[", " ").split("]")[0].split())
        r, metric = results[i], results[i]["metrics"][j]
        hits = [e for e in parsed if (e.task_type, e.dataset_type, e.dataset_config, e.metric_type)
                == (r["task"]["type"], r["dataset"]["type"], r["dataset"]["config"], metric["type"])]
        assert len(hits) == 1 and hits[0].metric_value == value["value"]
    # one result per (benchmark, protocol, direction): huggingface_hub's five grouping fields all differ
    keys = [(e.task_type, e.dataset_type, e.dataset_config, e.dataset_split, e.dataset_revision) for e in parsed]
    assert len(set(keys)) == len(results) == 2 * 5 + 1  # 5 retrieval results × 2 directions + zero-shot
    types = {r["task"]["type"] for r in results}
    assert types == {"text-to-image-retrieval", "image-to-text-retrieval", "zero-shot-image-classification"}
    zs = next(r for r in results if r["task"]["type"] == "zero-shot-image-classification")
    assert [x["type"] for x in zs["metrics"]] == ["accuracy", "top_5_accuracy"]
    assert zs["metrics"][0]["value"] == round(read_result(stored["zeroshot"]).metrics["classification"]["top-1"], 2)
    flickr = next(r for r in results if r["dataset"]["type"] == "flickr30k" and r["task"]["type"].startswith("text"))
    assert [x["type"] for x in flickr["metrics"]] == ["recall_at_1", "recall_at_5", "recall_at_10", "mean_rank",
                                                      "median_rank", "mrr"]
    r1 = flickr["metrics"][0]
    ci = read_result(stored["flickr"]).ci95["t2i"]["R@1"]
    assert r1["args"]["ci95"] == [round(ci[0], 2), round(ci[1], 2)] and r1["args"]["n_queries"] == 30
    assert flickr["source"] == {"url": "https://example.org/runs/", "name": f"hnbench {hnbench.__version__}"}
    urban = next(r for r in results if r["dataset"]["config"] == "test" and "Urban" in r["dataset"]["name"])
    assert urban["dataset"]["type"] == "BeichenZhang/Urban1k" and urban["dataset"]["revision"] == URBAN_REVISION
    # the benchmarks without a Hub id are named by hnbench's name, said once; monotonicity is listed with why
    assert sum("no Hugging Face Hub dataset id" in n for n in m["notes"]) == 1
    assert "coco" in m["notes"][0] and "urban1k" not in m["notes"][0]
    assert "monotonicity" in " ".join(_reasons(m)[stored["monotonicity"].name])
    own = next(r for r in results if r["dataset"]["type"] == HOSTILE)  # YAML quoting kept the name whole
    assert own["dataset"]["config"] == "default"


def test_updating_an_existing_card_changes_only_its_model_index_and_keeps_the_rest_byte_identical(stored, tmp_path):
    from huggingface_hub import ModelCard

    body = "\n# My model\n\nSome *text* with | pipes and --- dashes.\r\n\n---\nnot front matter\n"
    theirs = {"task": {"type": "text-classification"}, "dataset": {"name": "SST-2", "type": "sst2"},
              "metrics": [{"type": "accuracy", "value": 91.2}]}
    front = {"license": "mit", "tags": ["clip", "long captions"],
             "model-index": [{"name": "me/my-model", "results": [theirs]}], "library_name": "open_clip"}
    card = tmp_path / "README.md"
    card.write_text("---\n" + yaml.safe_dump(front, sort_keys=False) + "---" + body, newline="")
    out = tmp_path / "out"
    export = hnbench.export([stored["flickr"], stored["urban"]], "hf-model-index", out, card=str(card))
    assert export.card == card and export.files == []
    text = card.read_bytes().decode()
    assert text.endswith("---" + body) and text.count(body) == 1  # everything after the front matter, unchanged
    meta = yaml.safe_load(text.split("---\n")[1])
    assert [k for k in meta] == ["license", "tags", "model-index", "library_name"]
    assert meta["license"] == "mit" and meta["tags"] == ["clip", "long captions"]
    index = meta["model-index"]
    assert len(index) == 1 and index[0]["name"] == "me/my-model"  # the card's own name, no --model-name
    assert index[0]["results"][0] == theirs and len(index[0]["results"]) == 1 + 4
    parsed = ModelCard.load(card)
    assert yaml.safe_load(parsed.data.to_yaml())["model-index"] == index
    m = _check_traces(out, lambda v, field: round(v, 4 if field.endswith("MRR") else 2))
    assert m["card"]["path"] == str(card) and m["card"]["sha256"] == hashlib.sha256(card.read_bytes()).hexdigest()
    assert all(v["where"].startswith("model-index[0].results[") and v["file"] == str(card) for v in m["values"])
    assert min(int(v["where"].split("results[")[1].split("]")[0]) for v in m["values"]) == 1  # after theirs
    before = card.read_bytes()
    hnbench.export([stored["flickr"], stored["urban"]], "hf-model-index", out, card=str(card))  # a rerun
    assert card.read_bytes() == before


def test_several_models_get_a_card_each_and_an_mteb_folder_each(stored, tmp_path):
    """The micro model's results and the committed tagged model's: one card (one model-index entry) per model."""
    from huggingface_hub import ModelCard

    out = tmp_path / "cards"
    export = hnbench.export([stored["flickr"], TAGGED], "hf-model-index", out)
    assert export.files == [out / "hnb-micro-random-init" / "README.md", out / "hnbench-tiny-synthdense" / "README.md"]
    for path, name in zip(export.files, ("hnb-micro (random-init)", "hnbench-tiny (synthdense)")):
        card = ModelCard.load(path)
        assert card.data.model_name == name and len(card.data.eval_results) == 2 * 6
    _check_traces(out, lambda v, field: round(v, 4 if field.endswith("MRR") else 2))
    out = tmp_path / "mteb"
    hnbench.export([stored["flickr"], TAGGED], "mteb", out)
    assert sorted(p.name for p in (out / "results").iterdir()) == ["hnb-micro__random-init", "hnbench-tiny__synthdense"]


# --- Hub .eval_results ----------------------------------------------------------------------------------------
def test_eval_results_lists_every_result_it_cannot_write_with_the_reason(stored, tmp_path, monkeypatch):
    out = tmp_path / "none"
    export = hnbench.export([stored["folder"]], "hf-eval-results", out)
    assert export.files == [] and export.values == 0
    reasons = _reasons(_manifest(out))
    assert set(reasons) == {p.name for k, p in stored.items() if k != "folder"}
    assert "Hub Benchmark" in reasons[stored["urban"].name][0] and "eval.yaml" in reasons[stored["urban"].name][0]
    assert "not a registered benchmark" in reasons[stored["own"].name][0]
    # a benchmark registered as a Hub Benchmark: its entries are written and huggingface_hub reads them back
    from dataclasses import replace

    from hnbench.data.benchmarks import BENCHMARKS
    from hnbench.data.benchmarks.spec import HubIds

    monkeypatch.setitem(BENCHMARKS, "urban1k", replace(BENCHMARKS["urban1k"], hub=HubIds(
        dataset="BeichenZhang/Urban1k", benchmark="BeichenZhang/Urban1k")))
    out = tmp_path / "urban"
    export = hnbench.export([stored["urban"]], "hf-eval-results", out, source_url="https://example.org/r")
    assert export.files == [out / ".eval_results" / "urban1k-test.yaml"]
    entries = yaml.safe_load(export.files[0].read_text())
    assert [e["dataset"]["task_id"] for e in entries] == [f"urban1k_test_{d}_r{k}" for d in ("t2i", "i2t")
                                                         for k in (1, 5, 10)]
    assert all(e["dataset"]["revision"] == URBAN_REVISION and "95% CI" in e["notes"] for e in entries)
    _check_traces(out, lambda v, field: round(v, 2))
    hub = pytest.importorskip("huggingface_hub")
    if hasattr(hub, "parse_eval_result_entries"):  # huggingface_hub >= 1.4
        assert hub.eval_result_entries_to_yaml(hub.parse_eval_result_entries(entries)) == entries


# --- CLIP_benchmark -------------------------------------------------------------------------------------------
def test_clip_benchmark_runs_hold_its_keys_and_the_results_values_divided_by_100(stored, tmp_path):
    out = tmp_path / "cb"
    hnbench.export([stored["folder"]], "clip-benchmark", out)
    m = _check_traces(out, lambda v, field: v / 100)
    runs = {p.name: json.loads(p.read_text()) for p in out.glob("*.json") if p.name != "hnbench-export.json"}
    assert len(runs) == 6  # five retrieval results and the zero-shot one; monotonicity listed
    for run in runs.values():
        assert list(run)[:6] == ["dataset", "model", "pretrained", "task", "metrics", "language"]
    flickr = runs["flickr30k_random-init_hnb-micro_en_zeroshot_retrieval.json"]  # CLIP_benchmark's name template
    result = read_result(stored["flickr"])
    assert flickr["task"] == "zeroshot_retrieval" and flickr["language"] == "en"
    assert flickr["metrics"] == {**{f"image_retrieval_recall@{k}": result.metrics["t2i"][f"R@{k}"] / 100
                                    for k in (1, 5, 10)},
                                 **{f"text_retrieval_recall@{k}": result.metrics["i2t"][f"R@{k}"] / 100
                                    for k in (1, 5, 10)}}
    assert {r["dataset"] for r in runs.values()} == {"flickr30k", "mscoco_captions", "hnbench/coco/val2017",
                                                     "hnbench/urban1k/test", f"hnbench/{HOSTILE}/default",
                                                     "hnbench/colours/default"}
    zs = next(r for r in runs.values() if r["task"] == "zeroshot_classification")
    top = read_result(stored["zeroshot"]).metrics["classification"]
    assert zs["metrics"] == {"acc1": top["top-1"] / 100, "acc5": top["top-5"] / 100}
    assert any("mean_per_class_recall" in n for n in m["notes"])
    rows = list(csv.reader(io.StringIO((out / "benchmark.csv").read_text())))
    assert rows[0][:11] == ["acc1", "acc5", "mean_per_class_recall", "dataset", "model", "pretrained", "task",
                            "mean_average_precision", "image_retrieval_recall@5", "text_retrieval_recall@5",
                            "model_fullname"]
    assert rows[0][11:] == ["language", "image_retrieval_recall@1", "text_retrieval_recall@1",
                            "image_retrieval_recall@10", "text_retrieval_recall@10", "hnbench_version",
                            "hnbench_benchmark", "hnbench_protocol", "hnbench_dataset_fingerprint",
                            "hnbench_model_fingerprint", "hnbench_tie_rule"]
    table = [dict(zip(rows[0], row)) for row in rows[1:]]
    csv_flickr = next(r for r in table if r["dataset"] == "flickr30k")
    assert float(csv_flickr["image_retrieval_recall@5"]) == result.metrics["t2i"]["R@5"] / 100
    hostile = next(r for r in table if r["hnbench_protocol"] == "default" and r["task"] == "zeroshot_retrieval")
    assert hostile["hnbench_benchmark"] == "'" + HOSTILE  # a formula never reaches a spreadsheet as one


# --- MTEB -----------------------------------------------------------------------------------------------------
def test_mteb_files_pass_the_schema_check_with_hit_rate_and_hnbench_intervals_per_subset(stored, tmp_path):
    out = tmp_path / "mteb"
    hnbench.export([stored["folder"]], "mteb", out)
    m = _check_traces(out, lambda v, field: round(v if field.split(".")[-1] in ("MRR", "mean_rank", "median_rank")
                                                  else v / 100, 6))
    folder = out / "results" / "hnb-micro__random-init" / read_result(stored["flickr"]).model["fingerprint"]
    files = {p.name: json.loads(p.read_text()) for p in folder.glob("hnbench-*.json")}
    assert set(files) == {f"hnbench-{b}-{d}.json" for b in ("flickr30k-karpathy-test", "coco-karpathy-test",
                                                           "coco-val2017", "urban1k-test",
                                                           "SUM-1-2-b-q-b-x-y-default")
                          for d in ("t2i", "i2t")} | {"hnbench-colours-default-zeroshot.json"}
    for name, obj in files.items():
        assert check_task_result(obj, name) == [], name
        assert obj["mteb_version"] is None and obj["task_name"] == name.removesuffix(".json")
    flickr = read_result(stored["flickr"])
    for direction in ("t2i", "i2t"):
        entry = files[f"hnbench-flickr30k-karpathy-test-{direction}.json"]["scores"]["test"][0]
        for k in (1, 5, 10):
            assert entry[f"hit_rate_at_{k}"] == round(flickr.metrics[direction][f"R@{k}"] / 100, 6)
            lo, hi = flickr.ci95[direction][f"R@{k}"]
            assert entry[f"hnbench_ci95_hit_rate_at_{k}"] == [round(lo / 100, 6), round(hi / 100, 6)]
        assert entry["main_score"] == entry["hit_rate_at_1"] and entry["hnbench_n_queries"] > 0
        # five captions per image: an image's query has five positives, where MTEB's recall is not the hit rate
        assert ("recall_at_1" in entry) == (direction == "t2i")
    urban_i2t = files["hnbench-urban1k-test-i2t.json"]["scores"]["test"][0]  # one caption per image
    assert urban_i2t["recall_at_1"] == urban_i2t["hit_rate_at_1"]
    assert files["hnbench-urban1k-test-t2i.json"]["dataset_revision"] == URBAN_REVISION
    zs = files["hnbench-colours-default-zeroshot.json"]["scores"]["test"][0]
    assert zs["main_score"] == zs["accuracy"] == round(read_result(stored["zeroshot"]).metrics["classification"]
                                                       ["top-1"] / 100, 6)
    meta = json.loads((folder / "model_meta.json").read_text())
    assert meta["name"] == "hnb-micro/random-init" and meta["n_parameters"] == flickr.model["n_params"]
    lines = [json.loads(x) for x in (folder / "run_settings.jsonl").read_text().splitlines()]
    assert sorted(x["task"] + ".json" for x in lines) == sorted(files)
    assert stored["monotonicity"].name in _reasons(m)


def test_hnbench_schema_check_names_what_mteb_would_refuse():
    good = {"dataset_revision": "x", "task_name": "t", "mteb_version": None, "evaluation_time": 1.0,
            "scores": {"test": [{"main_score": 0.5, "hf_subset": "default", "languages": ["eng-Latn"]}]}}
    assert check_task_result(good, "results/a/b/t.json") == []
    bad = {**good, "scores": {"test": [{"hf_subset": 3, "languages": "eng", "hit_rate_at_1": 39.2,
                                        "recall_at_1": 0.1, "hnbench_version": "0.1.0"}]}}
    bad.pop("evaluation_time")
    problems = " | ".join(check_task_result(bad, "results/a/b/other.json"))
    for words in ("evaluation_time: missing", "main_score", "hf_subset", "languages", "39.2 is not a fraction",
                  "recall is not the hit rate", "not named after its task", ):
        assert words in problems, (words, problems)


def test_mteb_loads_the_exported_files_when_it_is_installed(stored, tmp_path):
    mteb = pytest.importorskip("mteb", reason="mteb is not installed (an optional check: pip install mteb-core, "
                                              "Python >= 3.11); hnbench's own schema check runs without it")
    from mteb.models.model_meta import ModelMeta

    out = tmp_path / "mteb"
    hnbench.export([stored["flickr"], stored["urban"]], "mteb", out)
    for path in sorted((out / "results").rglob("hnbench-*.json")):
        loaded = mteb.TaskResult.from_disk(path, load_historic_data=False)
        raw = json.loads(path.read_text())
        assert loaded.task_name == raw["task_name"] and loaded.get_score() == raw["scores"]["test"][0]["main_score"]
        assert loaded.scores["test"][0]["hnbench_ci95_hit_rate_at_1"] == raw["scores"]["test"][0][
            "hnbench_ci95_hit_rate_at_1"]  # per-subset keys survive loading
    meta = next(out.rglob("model_meta.json"))
    assert ModelMeta.model_validate(json.loads(meta.read_text())).name == "hnb-micro/random-init"


# --- open_clip ------------------------------------------------------------------------------------------------
def test_open_clip_csv_has_its_header_and_4_decimal_fractions_for_the_karpathy_sets_only(stored, tmp_path):
    out = tmp_path / "oc"
    hnbench.export([stored["folder"]], "open-clip-csv", out)
    text = (out / "openclip_retrieval_results.csv").read_text()
    rows = list(csv.reader(io.StringIO(text)))
    assert "\r" not in text and rows[0] == (  # open_clip's docs/openclip_retrieval_results.csv header, verbatim
        "name,pretrained,params (M),FLOPs (B),Average score,Flickr image retr. R@1,Flickr image retr. R@5,"
        "Flickr image retr. R@10,Flickr text retr. R@1,Flickr text retr. R@5,Flickr text retr. R@10,"
        "MSCOCO image retr. R@1,MSCOCO image retr. R@5,MSCOCO image retr. R@10,MSCOCO text retr. R@1,"
        "MSCOCO text retr. R@5,MSCOCO text retr. R@10,WinoGAViL avg jaccard score,WinoGAViL jaccard score 10,"
        "WinoGAViL jaccard score 10-12,WinoGAViL jaccard score 12,WinoGAViL jaccard score 5,"
        "WinoGAViL jaccard score 5-6,WinoGAViL jaccard score 6").split(",")
    assert len(rows) == 2
    row = dict(zip(rows[0], rows[1]))
    flickr, coco = read_result(stored["flickr"]), read_result(stored["coco"])
    assert row["name"] == "hnb-micro" and row["pretrained"] == "random-init"
    assert row["params (M)"] == f"{flickr.throughput['params']['total'] / 1e6:.2f}".rstrip("0").rstrip(".")
    assert flickr.throughput["params"]["total"] == flickr.model["n_params"]
    gflops = flickr.throughput["gflops"]["image"] + flickr.throughput["gflops"]["text"]  # open_clip's whole-model gflops
    assert row["FLOPs (B)"] == f"{gflops:.2f}".rstrip("0").rstrip(".")
    for s, result in (("Flickr", flickr), ("MSCOCO", coco)):
        for d, direction in (("image", "t2i"), ("text", "i2t")):
            for k in (1, 5, 10):
                assert row[f"{s} {d} retr. R@{k}"] == f"{result.metrics[direction][f'R@{k}'] / 100:.4f}"
    assert row["Average score"] == row["WinoGAViL avg jaccard score"] == ""

    def short(x: float) -> str:
        return f"{x:.2f}".rstrip("0").rstrip(".")

    m = _check_traces(out, lambda v, field: short(v / 1e6) if field == "throughput.params.total"
                      else short(v["image"] + v["text"]) if field == "throughput.gflops" else f"{v / 100:.4f}")
    assert not any("FLOPs (B)" in n for n in m["notes"])  # every result of the row records its FLOPs
    reasons = _reasons(m)
    assert "karpathy-test" in reasons[stored["val2017"].name][0] and "val2017" in reasons[stored["val2017"].name][0]
    assert "Flickr30k and COCO" in reasons[stored["urban"].name][0]
    assert "retrieval results only" in reasons[stored["zeroshot"].name][0]


# --- every format: determinism, traces, bad input ----------------------------------------------------------------
@pytest.mark.parametrize("fmt", ["hf-model-index", "hf-eval-results", "clip-benchmark", "mteb", "open-clip-csv"])
def test_a_re_export_is_byte_identical(stored, tmp_path, fmt):
    inputs = sorted(p for k, p in stored.items() if k != "folder")
    first, second = tmp_path / "a", tmp_path / "b"
    hnbench.export(inputs, fmt, first)
    hnbench.export(list(reversed(inputs)), fmt, second)  # the order given does not matter
    assert snapshot(first) == snapshot(second)
    before = snapshot(first)
    assert main(["-q", "export", *map(str, inputs), "--format", fmt, "--output", str(first)]) == 0  # a rerun
    assert snapshot(first) == before


def test_a_local_checkpoint_is_exported_under_the_name_given_never_its_path(tmp_path, capsys):
    """The committed results: a checkpoint file's path is refused without --model-name and absent with it."""
    path = read_result(CHECKPOINT).model["pretrained"]
    out = tmp_path / "ckpt"
    assert main(["export", str(CHECKPOINT), "--format", "clip-benchmark", "--output", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("hnbench: error:") and "--model-name" in err and not out.exists()
    for fmt in ("hf-model-index", "clip-benchmark", "mteb"):
        target = tmp_path / fmt
        code = main(["-q", "export", str(CHECKPOINT), "--format", fmt, "--output", str(target), "--model-name",
                     "hnbench/tiny-hn-clip"])
        assert code == 0
        written = "".join((target / f["path"]).read_text() for f in _manifest(target)["files"])
        assert path not in written and "checkpoint.safetensors" not in written and "hnbench/tiny-hn-clip" in written
    runs = [p for p in (tmp_path / "clip-benchmark").glob("*.json") if p.name != "hnbench-export.json"]
    assert json.loads(runs[0].read_text())["pretrained"] == "hnbench/tiny-hn-clip"
    # several committed models at once: a tagged one exports; --model-name names one model only
    assert main(["export", str(TAGGED), str(CHECKPOINT), "--format", "mteb", "--output", str(tmp_path / "two"),
                 "--model-name", "a/b"]) == 2
    assert "--model-name names one model" in capsys.readouterr().err


def _main(argv: list[str]) -> int:
    """``hnbench ARGV``'s exit status (argparse's own errors exit by SystemExit)."""
    try:
        return main(argv)
    except SystemExit as e:
        return int(e.code or 0)


def test_bad_input_is_one_line_and_writes_nothing(stored, tmp_path, capsys):
    out = tmp_path / "out"
    not_result = tmp_path / "compare.json"
    not_result.write_text(json.dumps({"rows": []}))
    cases = [
        ([str(not_result), "--format", "mteb", "--output", str(out)], "not an hnbench result file"),
        ([str(stored["flickr"]), "--format", "papers-with-code", "--output", str(out)], "invalid choice"),
        ([str(tmp_path / "missing.json"), "--format", "mteb", "--output", str(out)], "no such result file"),
        ([str(stored["flickr"]), "--format", "mteb", "--output", str(out), "--model-name", "noorg"], "ORG/NAME"),
        ([str(stored["flickr"]), "--format", "mteb", "--output", str(out), "--card", str(not_result)],
         "--format hf-model-index"),
        ([str(stored["flickr"]), "--format", "hf-model-index", "--output", str(out), "--source-url", "not a url"],
         "--source-url"),
    ]
    for argv, words in cases:
        assert _main(["export", *argv]) == 2, argv
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "Traceback" not in err and words in err, (argv, err)
        assert not out.exists()
    # the Python API: the same one-line errors (ConfigError), before anything is read or written
    with pytest.raises(ConfigError, match="unknown export format 'mteb2'; did you mean 'mteb'"):
        hnbench.export([stored["flickr"]], "mteb2", out)
    with pytest.raises(ConfigError, match="--card updates one model's card; the results hold 2 models"):
        hnbench.export([stored["flickr"], TAGGED], "hf-model-index", out, card=str(not_result))
    assert not out.exists()
    # a folder holding someone else's file: refused, nothing in it changed
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    before = snapshot(out)
    assert main(["export", str(stored["flickr"]), "--format", "clip-benchmark", "--output", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "did not write" in err and "notes.txt" in err and snapshot(out) == before
    # an earlier export of other inputs: refused without --overwrite; with it, its files not rewritten are removed
    shutil.rmtree(out)
    hnbench.export([stored["flickr"], stored["coco"]], "clip-benchmark", out)
    before = snapshot(out)
    assert main(["export", str(stored["flickr"]), "--format", "clip-benchmark", "--output", str(out)]) == 2
    assert "other inputs" in capsys.readouterr().err and snapshot(out) == before
    assert main(["-q", "export", str(stored["flickr"]), "--format", "clip-benchmark", "--output", str(out),
                 "--overwrite"]) == 0
    assert not any("mscoco" in p.name for p in out.iterdir())
    # an exported file edited since: refused without --overwrite (it is no longer what hnbench wrote)
    edited = next(p for p in out.glob("flickr30k_*.json"))
    edited.write_text("{}")
    assert main(["export", str(stored["flickr"]), "--format", "clip-benchmark", "--output", str(out)]) == 2
    assert "changed since hnbench wrote it" in capsys.readouterr().err
    # a per-query file that disagrees with its JSON: one line, nothing written
    copy = tmp_path / "edited"
    copy.mkdir()
    record = json.loads(stored["flickr"].read_text())
    shutil.copy(stored["flickr"].parent / record["per_query"], copy / record["per_query"])
    record["metrics"]["t2i"]["R@1"] = 99.0
    (copy / stored["flickr"].name).write_text(json.dumps(record))
    assert main(["export", str(copy), "--format", "mteb", "--output", str(tmp_path / "never")]) == 2
    assert "per-query" in capsys.readouterr().err and not (tmp_path / "never").exists()
