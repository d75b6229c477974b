"""The plug-and-play study (benchmarks/plug_and_play.py): resumable runs, the table from the stored results,
bad input. Real tiny runs: the bundled hnbench-tiny fine-tuned for one epoch on 10 synthdense images."""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
from pathlib import Path

import pytest
from conftest import assert_one_line_error, snapshot

ROOT = Path(__file__).resolve().parents[1]


sys.path.insert(0, str(ROOT / "benchmarks"))  # the scripts folder: the study imports hn_study beside it
import plug_and_play as pnp  # noqa: E402


def _readme(path: Path) -> Path:
    path.write_text(f"# a readme\n\nbefore\n\n{pnp.BEGIN}\nold table\n{pnp.END}\n\nafter\n")
    return path


def _args(root: Path, *extra: str) -> list[str]:
    """A tiny study in ``root``: 1 epoch on 2 synthdense families (10 images), 2 test families (10 pairs)."""
    return ["--output", str(root / "out"), "--results", str(root / "results"), "--report", str(root / "report"),
            "--readme", str(root / "README.md"), "--seeds", "1", "--epochs", "1", "--train-families", "2",
            "--test-families", "2", "--quiet", *extra]


def _block(readme: Path) -> str:
    text = readme.read_text()
    return text.split(pnp.BEGIN, 1)[1].split(pnp.END, 1)[0]


def _results(root: Path) -> dict[str, Path]:
    return pnp.stored(root / "results")


@pytest.fixture(scope="module")
def finished_study(tmp_path_factory):
    """clip and finelip, InfoNCE and L_HN, seed 0 (4 runs + the start model), run once for the module."""
    root = tmp_path_factory.mktemp("pnp")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HNBENCH_CACHE", str(tmp_path_factory.mktemp("cache")))
        mp.setenv("HF_HUB_OFFLINE", "1")
        mp.setitem(pnp.FRAMEWORKS, "nosuch", "tiny-synthdense-nosuch")  # a framework not in hnbench (yet)
        _readme(root / "README.md")
        assert pnp.main(_args(root, "--frameworks", "clip,finelip,nosuch")) == 0
    return root


def _copy(study: Path, dest: Path) -> Path:
    shutil.copytree(study, dest)
    for path in (dest / "report" / "plan.json", dest / "README.md"):  # absolute paths only in the run folders
        assert path.is_file()
    return dest


@pytest.mark.slow
def test_study_stores_every_result_and_writes_the_table(finished_study, capsys):
    found = _results(finished_study)
    assert set(found) == {"clip__infonce__s0", "clip__hn__s0", "finelip__infonce__s0", "finelip__hn__s0", "start"}
    for name in set(found) - {"start"}:
        res = json.loads(found[name].read_text())
        assert res["model"]["pretrained"].endswith(f"{name}/checkpoint.safetensors")
        assert res["dataset"]["n_images"] == 10
        assert (finished_study / "report" / "runs" / f"{name}.json").is_file()  # hnbench's train_config.json copy
        cfg = json.loads((finished_study / "report" / "runs" / f"{name}.json").read_text())["config"]
        assert (cfg["objective"], cfg["loss"], cfg["seed"], cfg["epochs"]) == (name.split("__")[0], name.split("__")[1], 0, 1)
    block = _block(finished_study / "README.md")
    text = (finished_study / "README.md").read_text()
    assert text.startswith("# a readme\n\nbefore\n\n") and text.endswith("\n\nafter\n") and "old table" not in text
    assert "| clip (`tiny-synthdense-hn`)" in block and "| finelip (`tiny-synthdense-finelip`)" in block
    assert "Not run: nosuch (objective 'nosuch' is not in this hnbench yet)" in block
    assert block.strip() == (finished_study / "report" / "table.md").read_text().strip()
    summary = json.loads((finished_study / "report" / "summary.json").read_text())
    clip = next(r for r in summary["frameworks"] if r["framework"] == "clip")
    cmp = json.loads((finished_study / "out" / "compare" / "clip__s0" / "compare.json").read_text())  # hnbench compare's
    t2i = next(r for r in cmp["rows"] if r["direction"] == "t2i")
    assert clip["t2i"]["infonce"] == t2i["r_baseline"] and clip["t2i"]["hn"] == t2i["r_model"]
    assert clip["t2i"]["delta"] == pytest.approx(t2i["delta"])
    assert f"| {t2i['r_baseline']:.2f} | {t2i['r_model']:.2f} | {t2i['delta']:+.2f} |" in " ".join(block.split())


@pytest.mark.slow
def test_study_resume_skips_finished_runs_and_redoes_half_written_ones(finished_study, tmp_path, capsys):
    root = _copy(finished_study, tmp_path / "study")
    before = _results(root)
    runs = root / "out" / "runs"
    # clip__hn__s0: killed after its last state, before the export and the evaluation's JSON (its parquet stays)
    (runs / "clip__hn__s0" / "train_config.json").unlink()
    (runs / "clip__hn__s0" / "checkpoint.safetensors").unlink()
    before["clip__hn__s0"].unlink()
    # finelip__infonce__s0: killed in its first epoch: no resumable state, only what the run had written
    shutil.rmtree(runs / "finelip__infonce__s0" / "last")
    (runs / "finelip__infonce__s0" / "train_config.json").unlink()
    (runs / "finelip__infonce__s0" / "checkpoint.safetensors").unlink()
    before["finelip__infonce__s0"].unlink()
    kept = {n: before[n].read_bytes() for n in ("clip__infonce__s0", "finelip__hn__s0", "start")}
    kept_ckpt = (runs / "clip__infonce__s0" / "checkpoint.safetensors").stat().st_mtime_ns
    capsys.readouterr()
    assert pnp.main(_args(root, "--frameworks", "clip,finelip")) == 0
    err = capsys.readouterr().err
    assert "4 runs planned, 2 finished, 2 to do" in err
    assert "clip__hn__s0: resuming" in err and "finelip__infonce__s0: restarting (no resumable state)" in err
    assert "clip__infonce__s0:" not in err and "finelip__hn__s0:" not in err
    after = _results(root)
    assert set(after) == set(before)
    assert {n: after[n].read_bytes() for n in kept} == kept  # finished runs: not trained, not scored again
    assert (runs / "clip__infonce__s0" / "checkpoint.safetensors").stat().st_mtime_ns == kept_ckpt
    for name in ("clip__hn__s0", "finelip__infonce__s0"):
        assert (runs / name / "checkpoint.safetensors").is_file()
        assert json.loads(after[name].read_text())["model"]["pretrained"].endswith(f"{name}/checkpoint.safetensors")
    # another machine with only the committed results (no run folders): nothing to do, the same table
    table = _block(root / "README.md")
    shutil.rmtree(root / "out")
    assert pnp.main(_args(root, "--frameworks", "clip,finelip")) == 0
    assert "4 runs planned, 4 finished, 0 to do" in capsys.readouterr().err
    assert not (root / "out" / "runs").exists()
    assert _block(root / "README.md") == table


def _flip_one_t2i_hit(result: Path) -> float:
    """Make the first t2i query of ``result`` a miss at R@1 if it was a hit (else a hit), keeping the JSON and its
    per-query file consistent (R@1 and the parquet's sha256); returns the new t2i R@1."""
    import pandas as pd

    d = json.loads(result.read_text())
    pq = result.parent / d["per_query"]
    frame = pd.read_parquet(pq)
    first = frame.index[frame["direction"] == "t2i"][0]
    frame.loc[first, "rank"] = 2 if frame.loc[first, "rank"] == 1 else 1
    frame.to_parquet(pq, index=False)
    ranks = frame.loc[frame["direction"] == "t2i", "rank"]
    d["metrics"]["t2i"]["R@1"] = 100.0 * float((ranks <= 1).mean())
    d["per_query_sha256"] = hashlib.sha256(pq.read_bytes()).hexdigest()
    result.write_text(json.dumps(d))
    return d["metrics"]["t2i"]["R@1"]


@pytest.mark.slow
def test_study_table_is_computed_from_the_stored_results(finished_study, tmp_path, capsys):
    root = _copy(finished_study, tmp_path / "study")
    shutil.rmtree(root / "out")  # no run folders: the table can only come from the results
    old = json.loads((root / "report" / "summary.json").read_text())
    old_clip = next(r for r in old["frameworks"] if r["framework"] == "clip")
    new_r1 = _flip_one_t2i_hit(_results(root)["clip__hn__s0"])
    assert new_r1 != old_clip["t2i"]["hn"]
    assert pnp.main(_args(root, "--frameworks", "clip,finelip", "--report-only")) == 0
    new = json.loads((root / "report" / "summary.json").read_text())
    clip = next(r for r in new["frameworks"] if r["framework"] == "clip")
    assert clip["t2i"]["hn"] == new_r1 and clip["t2i"]["infonce"] == old_clip["t2i"]["infonce"]
    assert clip["t2i"]["delta"] == pytest.approx(new_r1 - old_clip["t2i"]["infonce"])
    assert clip["i2t"] == old_clip["i2t"]
    block = _block(root / "README.md")
    assert f"{new_r1:.2f} | {clip['t2i']['delta']:+.2f}" in " ".join(block.split())
    # an edited number that no longer matches its per-query file is refused, nothing rewritten
    res = _results(root)["clip__hn__s0"]
    d = json.loads(res.read_text())
    d["metrics"]["i2t"]["R@1"] = 99.0
    res.write_text(json.dumps(d))
    readme = (root / "README.md").read_bytes()
    capsys.readouterr()
    assert pnp.main(_args(root, "--frameworks", "clip,finelip", "--report-only")) == 2
    assert_one_line_error(capsys.readouterr().err, res.name, "per-query")
    assert (root / "README.md").read_bytes() == readme


@pytest.mark.parametrize("frameworks, words", [("clip,nope", ("nope", "known", "finelip")),
                                                ("", ("--frameworks",))])
def test_study_unknown_framework_is_one_line_and_writes_nothing(tmp_path, capsys, frameworks, words):
    _readme(tmp_path / "README.md")
    before = snapshot(tmp_path)
    assert pnp.main(_args(tmp_path, "--frameworks", frameworks)) == 2
    assert_one_line_error(capsys.readouterr().err, *words)
    assert snapshot(tmp_path) == before


def test_bad_study_input_is_one_line_before_anything_runs(tmp_path, capsys):
    (tmp_path / "README.md").write_text("# no markers here\n")
    before = snapshot(tmp_path)
    assert pnp.main(_args(tmp_path, "--frameworks", "clip")) == 2
    assert_one_line_error(capsys.readouterr().err, "README.md", "marker")
    _readme(tmp_path / "README.md")
    (tmp_path / "report").mkdir()
    (tmp_path / "report" / "plan.json").write_text(json.dumps({"epochs": 3, "train_families": None,
                                                               "test_families": None}))
    before = snapshot(tmp_path)
    assert pnp.main(_args(tmp_path, "--frameworks", "clip")) == 2  # results of another study (3 epochs) there
    assert_one_line_error(capsys.readouterr().err, "plan.json", "--results")
    assert snapshot(tmp_path) == before
    assert pnp.main(_args(tmp_path, "--frameworks", "clip", "--seeds", "0")) == 2
    assert_one_line_error(capsys.readouterr().err, "seeds")


def test_a_framework_whose_runs_hnbench_refuses_is_reported_and_skipped(tmp_path, capsys, monkeypatch):
    from hnbench.registry import RECIPE_DIR

    recipe = tmp_path / "tiny-synthdense-finelip-b1.toml"  # refused before anything loads: one pair per batch
    recipe.write_text((RECIPE_DIR / "tiny-synthdense-finelip.toml").read_text().replace("batch_size = 16", "batch_size = 1"))
    monkeypatch.setitem(pnp.FRAMEWORKS, "finelip", str(recipe))
    _readme(tmp_path / "README.md")
    assert pnp.main(_args(tmp_path, "--frameworks", "finelip")) == 0
    err = capsys.readouterr().err
    assert "skipping finelip: hnbench refused finelip__infonce__s0: invalid training options: batch_size must be >= 2" in err
    summary = json.loads((tmp_path / "report" / "summary.json").read_text())
    assert list(summary["skipped"]) == ["finelip"] and summary["frameworks"] == [] and summary["runs"] == {}
    assert not (tmp_path / "results").exists() and not (tmp_path / "out" / "runs").exists()  # nothing trained or scored
    assert "Not run: finelip (hnbench refused" in _block(tmp_path / "README.md")


@pytest.mark.slow
def test_each_checkpoint_is_scored_on_the_compositional_protocol_and_the_losses_are_paired(finished_study, tmp_path,
                                                                                           capsys):
    """Every run and the start model have a compositional result (synthdense compositional, the choice task) of
    the same checkpoint; the column's numbers are those results' accuracies, Δ and the exact McNemar of the items
    one loss chose right and the other wrong; a finished run without that result is scored from its checkpoint
    (nothing retrained), or listed as not scored where the checkpoint is gone."""
    from hnbench.results.record import read_per_item, read_result
    from hnbench.results.significance import mcnemar_exact

    comp = pnp.stored(finished_study / "results", compositional=True)
    assert set(comp) == set(_results(finished_study))
    for name, path in comp.items():
        res = read_result(path)
        assert (res.task, res.dataset["name"], res.dataset["protocol"]) == ("choice", "synthdense", "compositional")
        assert name == "start" or res.model["pretrained"].endswith(f"{name}/checkpoint.safetensors")
    summary = json.loads((finished_study / "report" / "summary.json").read_text())
    clip = next(r for r in summary["compositional"]["frameworks"] if r["framework"] == "clip")
    (seed,) = clip["per_seed"]
    base, hn = (read_result(comp[f"clip__{loss}__s0"]) for loss in ("infonce", "hn"))
    assert (seed["acc_infonce"], seed["acc_hn"]) == (base.metrics["choice"]["accuracy"], hn.metrics["choice"]["accuracy"])
    assert clip["delta"] == pytest.approx(seed["acc_hn"] - seed["acc_infonce"])
    right = [read_per_item(r).set_index("item_id")["right_accuracy"] for r in (base, hn)]
    assert (seed["n_hn_only"], seed["n_infonce_only"]) == (int((right[1] & ~right[0]).sum()),
                                                           int((right[0] & ~right[1]).sum()))
    assert clip["p_value"] == mcnemar_exact(seed["n_hn_only"], seed["n_infonce_only"])
    assert set(clip["kind_delta"]) <= {"swap-att", "swap-rel", "replace-obj", "reorder"} and clip["kind_delta"]
    block = " ".join(_block(finished_study / "README.md").split())
    assert "| comp. InfoNCE | comp. L_HN | comp. Δ |" in block
    assert f"| {clip['infonce']:.2f} | {clip['hn']:.2f} | {clip['delta']:+.2f} |" in block
    assert "start model (not fine-tuned) | | " + f"{summary['compositional']['start']['accuracy']:.2f}" in block
    # a study stored before the column: finished runs without their compositional result
    root = _copy(finished_study, tmp_path / "study")
    for name in ("clip__hn__s0", "finelip__hn__s0"):
        pnp.stored(root / "results", compositional=True)[name].unlink()
    shutil.rmtree(root / "out" / "runs" / "finelip__hn__s0")  # its checkpoint gone
    kept = {n: p.read_bytes() for n, p in _results(root).items()}
    capsys.readouterr()
    assert pnp.main(_args(root, "--frameworks", "clip,finelip")) == 0
    err = capsys.readouterr().err
    assert "4 runs planned, 4 finished, 0 to do" in err and "clip__hn__s0: scoring" in err and "resuming" not in err
    assert {n: p.read_bytes() for n, p in _results(root).items()} == kept  # nothing retrained or rescored
    again = pnp.stored(root / "results", compositional=True)
    assert "clip__hn__s0" in again and "finelip__hn__s0" not in again
    new = json.loads((root / "report" / "summary.json").read_text())["compositional"]
    assert new["unscored"] == ["finelip__hn__s0"] and [r["framework"] for r in new["frameworks"]] == ["clip"]
    assert "without a compositional result" in _block(root / "README.md")
