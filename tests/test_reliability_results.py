"""Result files: never overwritten by another run, written as a consistent pair, validated on read by the
leaderboard, and created with the umask's mode; results from someone else are checked, skipped or refused."""

from __future__ import annotations

import errno
import io
import json
import logging
import os
from pathlib import Path

import pandas as pd
import pytest
from conftest import assert_one_line_error, make_pairs, snapshot, write_jsonl
from safetensors.torch import save_file

from hnbench import io as hnbench_io
from hnbench.cli import main
from hnbench.errors import ConfigError, DataError
from hnbench.evaluation.evaluate import evaluate
from hnbench.io import read_untrusted
from hnbench.models import load_model
from hnbench.results import record as results
from hnbench.results.leaderboard import collect
from hnbench.results.record import (
    EvalResult,
    ResultFormatError,
    read_per_query,
    read_result,
    write_result_pair,
)


@pytest.fixture
def fixed_model(micro_config, tmp_path) -> list[str]:
    """The micro model with fixed weights: every run has the same model fingerprint."""
    init = tmp_path / "init.safetensors"
    enc = load_model("hnb-micro", model_config=str(micro_config))
    save_file({k: v.contiguous() for k, v in enc.model.state_dict().items()}, str(init))
    return ["--model", "hnb-micro", "--model-config", str(micro_config), "--pretrained", str(init)]


def test_results_of_different_data_or_settings_never_share_a_file(fixed_model, tmp_path, capsys, caplog):
    # two different manifests, both named manifest.jsonl
    manifests = []
    for name, n in (("a", 4), ("b", 5)):
        pairs = make_pairs(tmp_path / name, n=n, seed=n)
        manifests.append(write_jsonl(tmp_path / name / "manifest.jsonl", [{"image": p, "caption": c} for p, c in pairs]))
    out = tmp_path / "out"

    def run(manifest, *extra):
        capsys.readouterr()
        rc = main(["-q", "eval", *fixed_model, "--dataset", str(manifest), "--output", str(out), "--num-workers", "0",
                   *extra])
        return rc, capsys.readouterr()

    assert run(manifests[0])[0] == 0
    full_a = snapshot(out)
    assert run(manifests[1])[0] == 0
    assert run(manifests[0], "--k", "1")[0] == 0
    after = snapshot(out)
    jsons = sorted(k for k in after if k.endswith(".json"))
    assert len(jsons) == 3 and len([k for k in after if k.endswith(".parquet")]) == 3
    assert all(after[k] == v for k, v in full_a.items())  # the full run of a kept its R@5 / R@10
    by_data = {read_result(out / j).dataset["fingerprint"]: read_result(out / j) for j in jsons}
    assert len(by_data) == 2
    ks = sorted(sorted(r.metrics["t2i"]) for r in map(lambda j: read_result(out / j), jsons))
    assert sum("R@5" not in m for m in ks) == 1  # the --k 1 result is its own file

    # a rerun of the same thing replaces its own file, and says so
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="hnbench.results.record"):
        assert run(manifests[0], "--k", "1")[0] == 0
    assert any("replaced" in r.getMessage() and "rerun" in r.getMessage() for r in caplog.records)
    assert sorted(snapshot(out)) == sorted(after)

    # anything else at that name (here an unreadable file) is refused: one line, exit 2, nothing written
    k1 = next(j for j in jsons if "R@5" not in read_result(out / j).metrics["t2i"])
    (out / k1).write_text('{"schema_version": 1, "model": ')
    before = snapshot(out)
    rc, cap = run(manifests[0], "--k", "1")
    assert rc == 2
    assert_one_line_error(cap.err, k1, "--overwrite")
    assert snapshot(out) == before
    with pytest.raises(ConfigError, match="--overwrite"):  # the Python API refuses the same way
        evaluate(load_model(fixed_model[1], fixed_model[5], model_config=fixed_model[3]), str(manifests[0]),
                 output_dir=out, ks=(1,), progress=False, num_workers=0)
    assert snapshot(out) == before
    assert run(manifests[0], "--k", "1", "--overwrite")[0] == 0
    assert "R@1" in read_result(out / k1).metrics["t2i"] and len(snapshot(out)) == len(before)


def _pair_result(ranks: list[int]) -> tuple[EvalResult, bytes, pd.DataFrame]:
    frame = pd.DataFrame({"direction": "t2i", "query_index": range(len(ranks)),
                          "query_id": [f"q{i}" for i in range(len(ranks))], "rank": ranks})
    buf = io.BytesIO()
    frame.to_parquet(buf, index=False)
    m = {"R@1": 100.0 * sum(r == 1 for r in ranks) / len(ranks), "n_queries": len(ranks)}
    r = EvalResult(model={"arch": "hnb-micro", "pretrained": None, "fingerprint": "f" * 16, "context_length": 32},
                   dataset={"name": "m", "protocol": None, "fingerprint": "d" * 16},
                   metrics={"t2i": m, "i2t": dict(m)}, settings={"ks": [1], "ci": False})
    return r, buf.getvalue(), frame


@pytest.mark.parametrize("fail", ["write parquet", "write json", "rename parquet", "rename json"])
def test_result_pair_is_old_or_new_when_a_step_fails(tmp_path, monkeypatch, fail):
    old, old_bytes, old_frame = _pair_result([1, 2, 1, 3])
    path = write_result_pair(old, tmp_path, old_bytes)
    new, new_bytes, new_frame = _pair_result([1, 1, 1, 1])  # the same run, other per-query numbers
    assert new.stem() == old.stem()

    calls = {"fsync": 0, "replace": 0}
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):  # the temporary files are synced once each: parquet, then JSON
        calls["fsync"] += 1
        if (fail, calls["fsync"]) in (("write parquet", 1), ("write json", 2)):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_fsync(fd)

    def replace(src, dst):
        calls["replace"] += 1
        if (fail, calls["replace"]) in (("rename parquet", 1), ("rename json", 2)):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_replace(src, dst)

    monkeypatch.setattr(results.os, "fsync", fsync)
    monkeypatch.setattr(results.os, "replace", replace)
    with pytest.raises(OSError, match="No space left"):
        write_result_pair(new, tmp_path, new_bytes)
    monkeypatch.undo()
    # on disk: exactly the old pair, consistent, and no temporary or orphaned file
    on_disk = read_result(path)
    assert on_disk.metrics == old.metrics
    pd.testing.assert_frame_equal(read_per_query(on_disk), old_frame)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([path.name, on_disk.per_query])
    # a later write without the fault gives the new pair, and the old parquet is gone
    write_result_pair(new, tmp_path, new_bytes)
    on_disk = read_result(path)
    assert on_disk.metrics == new.metrics
    pd.testing.assert_frame_equal(read_per_query(on_disk), new_frame)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([path.name, on_disk.per_query])


def test_reader_names_a_mismatched_result_pair(tmp_path):
    old, old_bytes, _ = _pair_result([1, 2, 1, 3])
    path = write_result_pair(old, tmp_path, old_bytes)
    r = read_result(path)
    assert r.per_query_sha256 and r.per_query.endswith(".queries.parquet")
    (tmp_path / r.per_query).write_bytes(_pair_result([1, 1, 1, 1])[1])  # another run's parquet under its name
    with pytest.raises(ResultFormatError) as e:
        read_per_query(r)
    assert "\n" not in str(e.value) and "does not match" in str(e.value) and r.per_query in str(e.value)


def _board_file(root: Path, name: str, **change) -> Path:
    r, _, _ = _pair_result([1, 2, 1, 3])
    d = r.to_dict()
    d["model"]["arch"] = name
    for key, value in change.items():
        if key == "t2i_r1":
            d["metrics"]["t2i"]["R@1"] = value
        else:
            d[key] = value
    path = root / f"{name}.json"
    path.write_text(json.dumps(d, allow_nan=True))
    return path


def test_leaderboard_skips_impossible_values_and_unknown_schemas(tmp_path, capsys, caplog):
    _board_file(tmp_path, "good")
    bad = {"inf": dict(t2i_r1=float("inf")), "over100": dict(t2i_r1=250.0), "negative": dict(t2i_r1=-1.0),
           "minus-schema": dict(schema_version=-1), "text": dict(t2i_r1="high")}
    for name, change in bad.items():
        _board_file(tmp_path, name, **change)
    _board_file(tmp_path, "nan", t2i_r1=float("nan"))
    with caplog.at_level(logging.WARNING):
        frame, skipped = collect([tmp_path])
    reasons = {Path(p).stem: r for p, r in skipped}
    assert set(reasons) == set(bad)
    assert all("impossible values" in reasons[n] for n in ("inf", "over100", "negative", "text"))
    assert "unknown schema version -1" in reasons["minus-schema"]
    assert sorted(frame["arch"]) == ["good", "nan"]
    warnings = [r.getMessage() for r in caplog.records]
    assert any("nan.json" in w and "t2i R@1 is NaN" in w for w in warnings)
    assert sum("skipping" in w for w in warnings) == len(bad)
    # through the CLI: exit 0, bad files named under "Skipped files" and never ranked
    out = tmp_path / "board"
    out.mkdir()
    assert main(["-q", "leaderboard", str(tmp_path), "--output", str(out / "lb.md")]) == 0
    md = (out / "lb.md").read_text()
    table, skipped_md = md.split("## Skipped files")
    assert "good (random init)" in table and "nan (random init)" in table
    for name in bad:
        assert f"{name}.json" in skipped_md and f"{name} (" not in table
    with pytest.raises(ResultFormatError, match="impossible values"):  # every reader refuses them
        read_result(tmp_path / "inf.json")


def test_files_are_written_with_the_umask_mode(tmp_path):
    old = os.umask(0o027)
    try:
        hnbench_io.process_umask.cache_clear()
        hnbench_io.atomic_write_bytes(tmp_path / "a.bin", b"x")
        r, data, _ = _pair_result([1, 2])
        path = write_result_pair(r, tmp_path / "res", data)
        modes = {p.name: p.stat().st_mode & 0o777 for p in [tmp_path / "a.bin", *path.parent.iterdir()]}
    finally:
        os.umask(old)
        hnbench_io.process_umask.cache_clear()
    assert set(modes.values()) == {0o640}, modes


# --- results from someone else ---------------------------------------------------------------------
def _stored_pair(root: Path, name: str, ranks: list[int], **model) -> Path:
    """A real result pair (JSON + per-query parquet, sha256 recorded) of model ``name`` in ``root``."""
    r, data, _ = _pair_result(ranks)
    r.model.update(arch=name, **model)
    return write_result_pair(r, root, data)


def test_leaderboard_skips_metrics_edited_against_their_per_query_file(tmp_path, capsys):
    root = tmp_path / "res"
    base = _stored_pair(root, "base", [1, 1, 2, 2])  # R@1 = 50
    edited = _stored_pair(root, "edited", [1, 2, 3, 4])  # R@1 = 25 in its per-query file ...
    d = json.loads(edited.read_text())
    d["metrics"]["t2i"]["R@1"] = 99.0  # ... and 99 in its JSON, edited by hand (the parquet's sha256 still matches)
    edited.write_text(json.dumps(d))
    frame, skipped = collect([root])
    assert list(frame["arch"]) == ["base"]
    ((path, reason),) = skipped
    assert path == str(edited) and "t2i R@1 = 99 in the JSON, 25 from the per-query file" in reason
    out = tmp_path / "board"
    assert main(["-q", "leaderboard", str(root), "--baseline", "base (random init)", "--output",
                 str(out / "lb.md")]) == 0
    table, skipped_md = (out / "lb.md").read_text().split("## Skipped files")
    assert "edited (random init)" not in table and "−74" not in table  # no delta the paired test contradicts
    assert edited.name in skipped_md and "do not match its per-query file" in skipped_md
    capsys.readouterr()
    assert main(["-q", "compare", str(base), str(edited)]) == 2  # every reader of the pair checks it
    assert_one_line_error(capsys.readouterr().err, str(edited), "t2i R@1 = 99", "per-query")


def _hangs_or_floods(tmp_path: Path) -> dict[str, Path]:
    """A folder of results from someone else: a FIFO and a link to /dev/zero named .json, an oversized
    (sparse) .json, and result JSONs whose per_query names /dev/zero or a file above the folder."""
    root = tmp_path / "theirs"
    good = _stored_pair(root, "good", [1, 2, 1, 3])
    os.mkfifo(root / "x.json")
    (root / "zero.json").symlink_to("/dev/zero")
    with open(root / "huge.json", "wb") as f:
        f.truncate(hnbench_io.MAX_JSON_BYTES + 1)
    (tmp_path / "outside.parquet").write_bytes((root / read_result(good).per_query).read_bytes())
    files = {"good": good, "fifo": root / "x.json", "zero": root / "zero.json", "huge": root / "huge.json"}
    for name, per_query in (("devzero", "/dev/zero"), ("above", "../outside.parquet")):
        d = json.loads(good.read_text())
        d.update(per_query=per_query, per_query_sha256=None)
        d["model"]["arch"] = name
        files[name] = root / f"{name}.json"
        files[name].write_text(json.dumps(d))
    return files


@pytest.mark.timeout(120)  # before the fix a FIFO hangs the reader: the test fails instead of stopping the suite
def test_untrusted_result_folders_neither_hang_nor_flood_nor_leave_their_folder(tmp_path, micro_config,
                                                                                               capsys):
    files = _hangs_or_floods(tmp_path)
    root = files["good"].parent
    out = tmp_path / "board"
    out.mkdir()
    assert main(["-q", "leaderboard", str(root), "--output", str(out / "lb.md")]) == 0
    table, skipped_md = (out / "lb.md").read_text().split("## Skipped files")
    assert "good (random init)" in table
    reasons = {line.split("`")[1]: line for line in skipped_md.splitlines() if line.startswith("- ")}
    assert "a FIFO, not a regular file" in reasons[str(files["fifo"])]
    assert "a device, not a regular file" in reasons[str(files["zero"])]
    assert "more than the" in reasons[str(files["huge"])]
    assert "lies outside the folder" in reasons[str(files["above"])] and "outside the folder" in reasons[
        str(files["devzero"])]
    assert "devzero (random init)" not in table and "above (random init)" not in table
    # compare, hardness --results and browse read results the same way: one line, exit 2, nothing written
    for name, words in (("fifo", ("FIFO",)), ("zero", ("device",)), ("devzero", ("/dev/zero", "outside")),
                        ("above", ("../outside.parquet", "outside"))):
        for argv in (["compare", str(files["good"]), str(files[name]), "--output", str(tmp_path / "cmp")],
                     ["browse", str(files[name]), "--output", str(tmp_path / "page")],
                     ["hardness", "--captions", str(_captions(tmp_path)), "--model", "hnb-micro", "--model-config",
                      str(micro_config), "--results", str(files[name]), "--output", str(tmp_path / "hard")]):
            capsys.readouterr()
            assert main(["-q", *argv]) == 2, argv
            assert_one_line_error(capsys.readouterr().err, str(files[name]), *words)
    assert not any((tmp_path / d).exists() for d in ("cmp", "page", "hard"))


def _captions(tmp_path: Path) -> Path:
    path = tmp_path / "caps.txt"
    path.write_text("\n".join(f"caption q{i}" for i in range(4)) + "\n")
    return path


def test_malformed_result_fields_are_named_and_the_file_skipped(tmp_path, capsys):
    _board_file(tmp_path, "good")
    bad = {"arch-number": ("model", "arch", 5), "protocol-list": ("dataset", "protocol", ["test"]),
           "name-null": ("dataset", "name", None), "t2i-text": ("metrics", "t2i", "high")}
    for stem, (group, key, value) in bad.items():
        d = json.loads(_board_file(tmp_path, stem).read_text())
        d[group][key] = value
        (tmp_path / f"{stem}.json").write_text(json.dumps(d))
    frame, skipped = collect([tmp_path])
    assert list(frame["arch"]) == ["good"]
    reasons = {Path(p).stem: r for p, r in skipped}
    assert set(reasons) == set(bad)
    for stem, (group, key, _) in bad.items():
        assert f"malformed fields: {group}.{key} is" in reasons[stem], reasons[stem]
    assert "dataset.name is null, not a text" in reasons["name-null"]  # named, not dropped silently
    out = tmp_path / "board"
    assert main(["-q", "leaderboard", str(tmp_path), "--output", str(out / "lb.md")]) == 0
    assert all(f"{stem}.json" in (out / "lb.md").read_text().split("## Skipped files")[1] for stem in bad)
    capsys.readouterr()
    assert main(["-q", "compare", str(tmp_path / "good.json"), str(tmp_path / "arch-number.json")]) == 2
    assert_one_line_error(capsys.readouterr().err, "arch-number.json", "model.arch is a number")


def test_result_names_over_255_bytes_are_shortened_and_normal_names_kept(fixed_model, tmp_path, capsys):
    r, data, _ = _pair_result([1, 2])
    assert r.stem() == "hnb-micro-random-ffffffff__m-default__dddddddd-" + r.settings_hash()  # as stored before
    long_weights = tmp_path / ("w" * 240 + ".safetensors")  # a 252-byte file name: fine on disk, too long inside
    long_weights.write_bytes(Path(fixed_model[5]).read_bytes())  # a result's (+ .<sha12>.queries.parquet)
    pairs = make_pairs(tmp_path / "d", n=4)
    manifest = write_jsonl(tmp_path / "d" / "m.jsonl", [{"image": p, "caption": c} for p, c in pairs])
    argv = ["-q", "eval", *fixed_model[:4], "--pretrained", str(long_weights), "--dataset", str(manifest), "--output",
            str(tmp_path / "out"), "--num-workers", "0", "--no-ci"]
    assert main(argv) == 0, capsys.readouterr().err
    names = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert len(names) == 2 and all(len(n.encode()) <= 255 for n in names)
    (json_name,) = [n for n in names if n.endswith(".json")]
    assert json_name.startswith("hnb-micro-" + "w" * 23 + "-") and read_result(tmp_path / "out" / json_name).per_query
    assert main(argv) == 0  # a rerun finds and replaces its own (shortened) file
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == names
    other = tmp_path / ("w" * 239 + "x.safetensors")  # the same first characters: another name (the digest)
    other.write_bytes(long_weights.read_bytes())
    argv[argv.index(str(long_weights))] = str(other)
    assert main(argv) == 0
    assert len(list((tmp_path / "out").glob("*.json"))) == 2


def test_a_folder_named_like_a_result_is_refused_as_a_directory(tmp_path):
    """A directory named ``x.json`` is refused as a directory by the one untrusted reader (it raised
    IsADirectoryError from ``os.fdopen`` before its own check), and the leaderboard skips it by name."""
    (tmp_path / "x.json").mkdir()
    with pytest.raises(ResultFormatError, match="is a directory, not a regular file"):
        read_result(tmp_path / "x.json")
    with pytest.raises(DataError, match="is a directory, not a regular file"):
        read_untrusted(tmp_path / "x.json", "a result")
