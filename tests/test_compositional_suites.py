"""The compositional suites: ``compositional`` (every official protocol of SugarCrepe, SugarCrepe++, Winoground and
ARO) and ``long-story-short`` (long-caption retrieval beside compositional benchmarks, as that paper's table);
their reference numbers (MTEB's published results, verified; the papers' recalled ones, marked unverified) joining
the leaderboard tables of the protocol that produced them only."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from choice_fixtures import stored
from test_bench_aro import build_order, build_vg
from test_bench_sugarcrepe import (
    PP_SUBSETS,
    SUBSETS,
    build_sugarcrepe,
    build_sugarcrepe_pp,
    official_sugarcrepe,
    official_sugarcrepe_pp,
)
from test_bench_winoground import build_jsonl, group_correct, image_correct, text_correct

from hnbench.cli import main
from hnbench.data.benchmarks import BENCHMARKS
from hnbench.data.benchmarks.aro import MIN_PAIR_ITEMS, SYMMETRIC_RELATIONS
from hnbench.evaluation.suites import get_suite
from hnbench.io import is_record
from hnbench.results.leaderboard import leaderboard
from hnbench.results.record import read_per_item, read_result
from hnbench.results.reported import reported_rows

OFFICIAL = {"sugarcrepe": [s.replace("_", "-") for s in SUBSETS], "sugarcrepe-pp": [s.replace("_", "-") for s in PP_SUBSETS],
            "winoground": ["official"], "aro": ["vg-relation", "vg-attribution", "coco-order", "flickr30k-order"]}
MTEB_SOURCE = "embeddings-benchmark/results@f4cc6c8b:"


def _sections(md: str, level: str) -> dict[str, str]:
    return {block.split("\n", 1)[0]: block for block in md.split(f"\n{level} ")[1:]}


def test_compositional_suite_is_every_official_protocol_and_no_mteb_variant():
    suite = get_suite("compositional")
    assert [(e.benchmark, e.protocol) for e in suite.entries] == [(b, p) for b, ps in OFFICIAL.items() for p in ps]
    assert {e.task for e in suite.entries} == {"choice"} and len(suite.entries) == 7 + 5 + 1 + 4
    variants = {(b, p.name) for b in OFFICIAL for p in BENCHMARKS[b].protocols if not p.official}
    assert variants == {("sugarcrepe", "mteb"), ("winoground", "mteb"), ("aro", "vg-relation-mteb"),
                        ("aro", "vg-attribution-mteb")}
    paper = get_suite("long-story-short")
    labels = [(e.label, e.task) for e in paper.entries]
    assert labels[:3] == [("urban1k/test", "retrieval"), ("docci/test", "retrieval"), ("iiw/612", "retrieval")]
    assert labels[3:] == [(f"{b}/{p}", "choice") for b in ("aro", "winoground", "sugarcrepe-pp") for p in OFFICIAL[b]]


def test_reference_numbers_are_mtebs_under_the_mteb_rules_and_the_papers_marked_unverified():
    rows = reported_rows()
    choice = rows[rows["task"] == "choice"].set_index(["arch", "benchmark", "protocol", "source"]).sort_index()
    mteb = choice[choice.index.get_level_values("source").str.startswith(MTEB_SOURCE)]
    b32 = mteb.loc["ViT-B/32"].droplevel("source")
    assert b32.loc[("sugarcrepe", "mteb"), "accuracy"] == 76.61
    assert tuple(b32.loc[("winoground", "mteb"), ["text", "image", "accuracy"]]) == (31.25, 11.25, 9.00)
    assert b32.loc[("aro", "vg-relation-mteb"), "accuracy"] == 51.76 and b32.loc[("aro", "coco-order"), "accuracy"] == 46.37
    l14 = mteb.loc["ViT-L/14"].droplevel("source")
    assert l14.loc[("aro", "vg-attribution-mteb"), "accuracy"] == 61.63 and l14.loc[("aro", "flickr30k-order"), "accuracy"] == 54.9
    assert len(mteb) == 12 and not mteb["note"].str.contains("unverified").any()
    others = choice[~choice.index.get_level_values("source").str.startswith(MTEB_SOURCE)]
    assert len(others) == 5 and others["note"].str.startswith("numbers unverified").all()
    assert tuple(others.loc[("ViT-B/32", "winoground", "official")].iloc[0][["text", "image", "accuracy"]]) == (30.75, 10.5, 8.0)


def _replicas(root: Path) -> Path:
    """Each compositional benchmark's replica in its released layout (the bench tests' builders) and a data-root map."""
    build_sugarcrepe(root / "sc")
    build_sugarcrepe_pp(root / "scpp")
    build_jsonl(root / "wg")
    build_vg(root / "aro")
    build_order(root / "aro", "coco")
    build_order(root / "aro", "flickr30k")
    folders = {"sugarcrepe": "sc", "sugarcrepe-pp": "scpp", "winoground": "wg", "aro": "aro"}
    (root / "map.json").write_text(json.dumps(folders))
    return root / "map.json"


def _aro_official(result, protocol: str) -> float:
    """The authors' rules on the stored scores: VG macro (symmetric relations out; pairs with ≥ 25 items), Order
    Precision@1 with the true caption first (argmax, ties to it right)."""
    frame = read_per_item(result)
    roles = list(frame.attrs["text_roles"])
    m = np.stack(frame["image_text"].to_numpy()).reshape(len(frame), len(roles))
    if protocol.endswith("-order"):
        return 100 * float(np.mean(np.argmax(m[:, [roles.index("correct_caption")] + [
            k for k, r in enumerate(roles) if r != "correct_caption"]], axis=1) == 0))
    right = m[:, roles.index("true_caption")] > m[:, roles.index("false_caption")]
    field = "field_relation_name" if protocol == "vg-relation" else "field_attributes"
    groups: dict[str, list[bool]] = {}
    for g, r in zip(frame[field], right):
        groups.setdefault(str(g), []).append(bool(r))
    kept = [v for g, v in groups.items() if (g not in SYMMETRIC_RELATIONS if protocol == "vg-relation"
                                             else len(v) >= MIN_PAIR_ITEMS)]
    return 100 * float(np.mean([np.mean(v) for v in kept]))


@pytest.mark.slow  # 17 evaluations of the micro model
def test_suite_compositional_writes_each_protocols_official_numbers_and_a_compositional_board(
        micro_config, tmp_path, capsys):
    roots = _replicas(tmp_path)
    out = tmp_path / "out"
    assert main(["-q", "suite", "compositional", "--model", "hnb-micro", "--model-config", str(micro_config),
                 "--data-root-map", str(roots), "--output", str(out), "--allow-count-mismatch",
                 "--num-workers", "0"]) == 0
    table = (out / "suite-compositional.md").read_text()
    assert table in capsys.readouterr().out and "failed" not in table
    results = {}
    for path in out.glob("*.json"):
        if is_record(path):  # the suite table's inputs record
            continue
        res = read_result(path)
        results[res.dataset["name"], res.dataset["protocol"]] = res
    assert sorted(results) == sorted((b, p) for b, ps in OFFICIAL.items() for p in ps)  # one result per protocol
    scores = {k: v for p in OFFICIAL["sugarcrepe"] for k, v in stored(results["sugarcrepe", p]).items()}
    for subset, value in official_sugarcrepe(tmp_path / "sc", scores).items():
        assert results["sugarcrepe", subset.replace("_", "-")].metrics["choice"]["accuracy"] == pytest.approx(100 * value)
    scores = {k: v for p in OFFICIAL["sugarcrepe-pp"] for k, v in stored(results["sugarcrepe-pp", p]).items()}
    for subset, value in official_sugarcrepe_pp(tmp_path / "scpp", scores).items():
        got = results["sugarcrepe-pp", subset.replace("_", "-")].metrics["choice"]
        assert (got["ITT"], got["TOT"]) == pytest.approx((100 * value["ITT"], 100 * value["TOT"]))
    wino = results["winoground", "official"]
    card = [{f"c{j}_i{i}": v["m"][i, j] for i in (0, 1) for j in (0, 1)} for v in stored(wino).values()]
    for name, rule in (("text", text_correct), ("image", image_correct), ("group", group_correct)):
        assert wino.metrics["choice"][name] == pytest.approx(100 * np.mean([rule(c) for c in card]))
    for protocol in OFFICIAL["aro"]:
        assert results["aro", protocol].metrics["choice"]["accuracy"] == pytest.approx(
            _aro_official(results["aro", protocol], protocol)), protocol
    # each cell of the suite table is its result's headline, linked to its file
    assert f"[{wino.metrics['choice']['accuracy']:.1f}]({Path(str(wino.path)).name})" in table

    board = leaderboard([out], reported=True)
    assert "## Option choice (compositional benchmarks)" in board and "## Retrieval" not in board
    tables = {title: t for title, t in _sections(board, "###").items() if " · " in title}  # not the Borda rank
    assert sorted(t.split(" · ")[0] for t in tables) == sorted(b for b, ps in OFFICIAL.items() for _ in ps)
    wino_table = next(t for title, t in tables.items() if title.startswith("winoground · official"))
    # the Winoground paper's (recalled, unverified) row joins the official table; MTEB's argmax numbers do not
    assert "30.75" in wino_table and "31.25" not in wino_table and "hnb-micro" in wino_table
    sc_table = next(t for title, t in tables.items() if title.startswith("sugarcrepe · add-att"))
    assert "CLIP (OpenAI)" not in sc_table  # MTEB's pooled SugarCrepe is the mteb protocol's, not a subset's
    assert not math.isnan(results["sugarcrepe", "add-att"].metrics["choice"]["accuracy"])


def test_mtebs_numbers_join_a_run_of_the_mteb_protocol(micro_config, tmp_path, monkeypatch):
    build_jsonl(tmp_path / "wg")
    code = main(["-q", "eval", "--model", "hnb-micro", "--model-config", str(micro_config), "--dataset", "winoground",
                 "--data-root", str(tmp_path / "wg"), "--protocol", "mteb", "--task", "choice", "--num-workers", "0",
                 "--allow-count-mismatch", "--output", str(tmp_path / "res")])
    assert code == 0
    tables = _sections(leaderboard([tmp_path / "res"], reported=True), "###")
    (title, table), = tables.items()
    assert title.startswith("winoground · mteb")
    assert "CLIP (OpenAI) [ViT-B/32] †" in table and "31.25" in table and "28.5" in table
    assert f"reported: {MTEB_SOURCE}" in table and "30.75" not in table  # the paper's official-rule row: not here
