"""What ``hnbench datasets list`` / ``info`` show: spec metadata, loaded counts, caption-length statistics."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from hnbench.data import load_dataset
from hnbench.data.benchmarks import BENCHMARKS, get_benchmark
from hnbench.data.benchmarks.spec import BenchmarkSpec, load_benchmark
from hnbench.registry import CAPTION_RULES, DATASETS


def _summary(x: np.ndarray) -> dict[str, float]:
    return {"mean": round(float(x.mean()), 1), "median": float(np.median(x)), "p95": float(np.percentile(x, 95)),
            "max": int(x.max())}


def caption_stats(captions: Sequence[str]) -> dict[str, Any]:
    """Caption lengths in words (whitespace-split) and in CLIP BPE tokens including start/end tokens,
    so ``share_over_77`` is the share a 77-token CLIP truncates (and likewise 248, Long-CLIP's length)."""
    from open_clip.tokenizer import SimpleTokenizer  # the BPE vocabulary ships with open_clip: no download

    tok = SimpleTokenizer()
    words = np.array([len(c.split()) for c in captions])
    tokens = np.array([len(tok.encode(c)) + 2 for c in captions])
    return {
        "words": _summary(words),
        "tokens": {**_summary(tokens), "share_over_77": round(float((tokens > 77).mean()), 4),
                   "share_over_248": round(float((tokens > 248).mean()), 4), "n_over_77": int((tokens > 77).sum()),
                   "n_over_248": int((tokens > 248).sum())},
        "tokenizer": "CLIP BPE (open_clip SimpleTokenizer), counts include start/end tokens",
    }


def _choice_info(p: Any) -> dict[str, Any]:
    """What an option-choice protocol adds to its listing: its published item count and rule."""
    from hnbench.data.choices import ChoiceProtocol

    if not isinstance(p, ChoiceProtocol):
        return {}
    return {"n_items": p.n_items, "counts": dict(p.counts), "scoring": p.scoring.to_dict()}


def spec_info(spec: BenchmarkSpec) -> dict[str, Any]:
    """A spec as plain JSON: source, terms, layout, protocols with their counts, downloadable files."""
    return {
        "name": spec.name, "title": spec.title, "publisher": spec.publisher, "homepage": spec.homepage,
        "license": spec.license, "citation": spec.citation, "layout": spec.layout,
        "default_protocol": spec.default_protocol, "notes": spec.notes,
        "protocols": [{"name": p.name, "families": list(p.families), "n_images": p.n_images,
                       "n_captions": p.n_captions, "caption_rule": p.caption,
                       "caption_rule_text": " ".join((CAPTION_RULES.get(p.caption).__doc__ or "").replace("``", "").split()),
                       "keeps_empty_captions": p.keep_empty, "description": p.description,
                       "aliases": list(p.aliases), "needs": [f"{s.filename} ({s.where})" for s in p.lists],
                       **_choice_info(p)}
                      for p in spec.protocols],
        "task": spec.task,
        "files": [{"file": r.filename, "source": r.url or (r.hf_repo and f"huggingface.co/datasets/{r.hf_repo}")
                   or "by hand", "sha256": r.sha256, "superseded_sha256": [h for h, _ in r.superseded],
                   "optional": r.optional, "manual": r.manual}
                  for r in spec.resources],
    }


def describe(
    name: str, *, data_root: str | None = None, protocol: str | None = None, split_file: Sequence[str] | None = None,
    skip_invalid: bool = False, allow_count_mismatch: bool = False, progress: bool = False,
    allow_outside_paths: bool = False,
) -> dict[str, Any]:
    """Everything ``hnbench datasets info`` shows. With data present (``data_root`` or the download
    location), the protocol is loaded as ``eval`` loads it (``skip_invalid``, ``allow_count_mismatch``
    alike) and its captions measured."""
    if name.lower() in BENCHMARKS:
        spec = get_benchmark(name)
        info = spec_info(spec)
        if data_root is None and not spec.default_root().is_dir():
            info["data"] = (f"no data found: pass --data-root DIR ({spec.layout}) or run "
                            f"`hnbench datasets download {name}`")
            return info
        if spec.task is not None:  # option-choice items (hnbench.data.choices): counts, no caption statistics
            from hnbench.data.choices import load_choice_benchmark

            items = load_choice_benchmark(spec, data_root=data_root, protocol=protocol, split_file=split_file or (),
                                          skip_invalid=skip_invalid, allow_count_mismatch=allow_count_mismatch,
                                          progress=progress, allow_outside_paths=allow_outside_paths)
            info.update(protocol=items.protocol, data_root=items.source, n_items=items.n_items,
                        n_images=items.n_images, n_texts=items.n_texts, fingerprint=items.fingerprint(),
                        count_check=items.meta.get("count_check"), files=items.meta.get("files"),
                        skipped={k: len(v) for k, v in items.skipped.items()})
            return info
        ds = load_benchmark(spec, data_root=data_root, protocol=protocol, split_file=split_file,
                            skip_invalid=skip_invalid, allow_count_mismatch=allow_count_mismatch, progress=progress,
                            allow_outside_paths=allow_outside_paths)
    else:  # another registered set (synthdense): no spec, just what loading it gives
        ds = load_dataset(name, data_root=data_root, protocol=protocol, skip_invalid=skip_invalid,
                          allow_outside_paths=allow_outside_paths)
        info = {"name": ds.name, "license": ds.meta.get("license"), "citation": None}
    info.update(protocol=ds.protocol, data_root=ds.source, n_images=ds.n_images, n_captions=ds.n_captions,
                fingerprint=ds.fingerprint(), count_check=ds.meta.get("count_check"),
                caption_rule=ds.meta.get("caption_rule"), split_lists=ds.meta.get("split_lists"),
                pairs_check=ds.meta.get("pairs_check"), missing_images=ds.meta.get("missing_images"),
                skipped={k: len(v) for k, v in ds.skipped.items()},
                caption_stats=caption_stats(ds.captions))
    return info


def list_rows() -> list[dict[str, Any]]:
    """One row per registered dataset: benchmarks with their protocols, other loaders by name."""
    rows = []
    for name in DATASETS.names():
        spec = BENCHMARKS.get(name)
        if spec is None:
            rows.append({"name": name, "title": DATASETS.help(name) or "(registered loader)", "protocols": [],
                         "license": ""})
            continue
        protos = [f"{p.name}{'*' if p.name == spec.default_protocol else ''} ("
                  + (f"{_choice_info(p)['n_items'] or '?'} items)" if _choice_info(p) else f"{p.n_images or '?'})")
                  for p in spec.protocols]
        rows.append({"name": name, "title": spec.title, "protocols": protos, "license": spec.license})
    return rows


def render_info(info: dict[str, Any]) -> str:
    """``describe()`` as readable text."""
    lines = [f"{info['name']}: {info.get('title', '')}".rstrip(": ")]
    for key in ("publisher", "homepage", "license", "layout", "notes"):
        if info.get(key):
            lines.append(f"  {key}: {info[key]}")
    for p in info.get("protocols", []):
        default = " (default)" if p["name"] == info.get("default_protocol") else ""
        if "scoring" in p:  # an option-choice protocol: items and rule, no captions
            lines.append(f"  protocol {p['name']}{default}: {p['n_items'] or '?'} items "
                         f"({', '.join(f'{k} {v:,}' for k, v in p['counts'].items())}) {p['description']}")
            continue
        needs = f"; needs {', '.join(p['needs'])}" if p["needs"] else ""
        lines.append(f"  protocol {p['name']}{default}: {p['n_images']} images / {p['n_captions']} captions, "
                     f"[{', '.join(p['families'])}] {p['description']}{needs}")
        lines.append(f"    caption rule {p['caption_rule']}: {p['caption_rule_text']}")
    if "data" in info:
        lines.append(f"  data: {info['data']}")
    if "n_items" in info:
        check = info.get("count_check") or {}
        lines += [f"  loaded {info['protocol']} from {info['data_root']}: {info['n_items']} items, {info['n_images']} "
                  f"images, {info['n_texts']} texts (count check: {check.get('status', 'n/a')}; skipped: "
                  f"{info['skipped'] or 'none'})", f"  fingerprint: {info['fingerprint']}"]
        lines += [f"  file {f['file']}: sha256 {f['sha256'][:16]}… verified={f['verified']}" for f in info["files"] or []]
    elif "n_images" in info:
        cs, check = info["caption_stats"], info.get("count_check") or {}
        w, t = cs["words"], cs["tokens"]
        status = check.get("status", "n/a")
        if status == "mismatch allowed":
            status = f"MISMATCH allowed, published {check['expected']}"
        protocol = f" {info['protocol']}" if info.get("protocol") else ""
        rule = f"; caption rule {info['caption_rule']}" if info.get("caption_rule") else ""
        lines += [f"  loaded{protocol} from {info['data_root']}: n_images {info['n_images']}, "
                  f"n_captions {info['n_captions']} (count check: {status}; skipped: {info['skipped'] or 'none'}"
                  f"{rule})",
                  f"  fingerprint: {info['fingerprint']}",
                  f"  caption words: mean {w['mean']}, median {w['median']}, p95 {w['p95']}, max {w['max']}",
                  f"  caption tokens: mean {t['mean']}, median {t['median']}, p95 {t['p95']}, max {t['max']}; "
                  f"over 77: {100 * t['share_over_77']:.1f}%, over 248: {100 * t['share_over_248']:.1f}%"]
        if info.get("pairs_check"):
            pc = info["pairs_check"]
            differ = f"; {pc['n_differing']} of {pc['n_listed']} pairs differ, e.g. {pc['differing'][0]}" if pc.get(
                "n_differing") else ""
            lines.append(f"  pairs check: {pc['status']}{differ}")
        if info.get("missing_images"):
            lines.append(f"  missing images ({len(info['missing_images'])}): {', '.join(info['missing_images'])}")
        for lst in info.get("split_lists") or []:
            lines.append(f"  split list {lst['file']}: sha256 {lst['sha256'][:16]}… verified={lst['verified']}")
    if info.get("citation"):
        lines += ["  citation:", *("    " + c for c in info["citation"].splitlines())]
    return "\n".join(lines)
