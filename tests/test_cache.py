"""The embedding cache: never encode twice, resume after a failure or a kill, never use a corrupt shard."""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import make_pairs, write_jsonl
from PIL import Image

from hnbench.cli import main
from hnbench.data import FileImages, HFImages, ImageSource, load_dataset
from hnbench.evaluation import cache as cache_mod
from hnbench.evaluation.cache import CorruptShardError, EmbeddingCache, decode_shard, encode_shard
from hnbench.evaluation.encode import encode_images, encode_texts
from hnbench.evaluation.evaluate import evaluate
from hnbench.models import load_model


@pytest.fixture(scope="module")
def micro_encoder(micro_config):
    import torch

    torch.manual_seed(0)
    return load_model("hnb-micro", model_config=str(micro_config))


@pytest.fixture
def manifest(tmp_path) -> Path:
    pairs = make_pairs(tmp_path, n=12)
    rows = [{"image": p, "caption": [c, c.upper()] if i % 4 == 0 else c} for i, (p, c) in enumerate(pairs)]
    return write_jsonl(tmp_path / "m.jsonl", rows)


class Flaky:
    """The encoder, but image batch number ``fail_at`` raises: a run dying mid-encoding."""

    def __init__(self, encoder, fail_at: int):
        self._encoder, self.fail_at, self.calls = encoder, fail_at, 0

    def __getattr__(self, name):
        return getattr(self._encoder, name)

    def encode_images(self, pixels):
        self.calls += 1
        if self.calls == self.fail_at:
            raise RuntimeError("simulated crash")
        return self._encoder.encode_images(pixels)


def _run(encoder, manifest, out, **kw):
    kw = {"progress": False, "num_workers": 0, "batch_size": 4, **kw}
    return evaluate(encoder, str(manifest), output_dir=out, **kw)


def _same_scores(a, b, out_a, out_b) -> None:
    assert a.metrics == b.metrics and a.ci95 == b.ci95 and a.tokens == b.tokens
    qa, qb = pd.read_parquet(Path(out_a) / a.per_query), pd.read_parquet(Path(out_b) / b.per_query)
    pd.testing.assert_frame_equal(qa, qb)


def test_shard_roundtrip_and_every_kind_of_damage_is_detected():
    rng = np.random.default_rng(0)
    keys = np.array([bytes([i]) * 16 for i in range(5)], dtype=cache_mod.KEY_DTYPE)
    vec, aux = rng.standard_normal((5, 8)).astype(np.float32), np.arange(5)
    data = encode_shard("text", "abc", keys, vec, aux)
    shard = decode_shard(data, kind="text", model_key="abc", dim=8)
    assert (shard.keys == keys).all() and np.array_equal(shard.vectors, vec) and np.array_equal(shard.aux, aux)
    flipped = bytearray(data)
    flipped[len(data) // 2] ^= 1
    for bad, match in [(bytes(flipped), "checksum"), (data[:-100], "checksum"), (data[:10], "truncated"),
                       (b"", "truncated"), (b"XX" + data[2:], "magic")]:
        with pytest.raises(CorruptShardError, match=match):
            decode_shard(bad)
    with pytest.raises(CorruptShardError, match="model_key"):
        decode_shard(data, model_key="other")
    with pytest.raises(CorruptShardError, match="dim"):
        decode_shard(data, dim=16)


def test_second_run_encodes_nothing_and_gives_identical_results(micro_encoder, manifest, tmp_path):
    cold = _run(micro_encoder, manifest, tmp_path / "cold")
    warm = _run(micro_encoder, manifest, tmp_path / "warm")
    plain = _run(micro_encoder, manifest, tmp_path / "plain", use_cache=False)
    n_img, n_cap = cold.dataset["n_images"], cold.dataset["n_captions"]
    assert cold.settings["cache"] is True and plain.settings["cache"] is False
    assert cold.settings["encoding"]["encoded"] == {"images": n_img, "texts": n_cap}
    assert cold.settings["encoding"]["cached"] == {"images": 0, "texts": 0}
    assert warm.settings["encoding"]["encoded"] == {"images": 0, "texts": 0}
    assert warm.settings["encoding"]["cached"] == {"images": n_img, "texts": n_cap}
    assert warm.settings["encoding"]["cache_key"] == cold.settings["encoding"]["cache_key"]
    _same_scores(cold, warm, tmp_path / "cold", tmp_path / "warm")
    _same_scores(cold, plain, tmp_path / "cold", tmp_path / "plain")
    # bit-identical vectors: the cold run batches exactly as an uncached run does
    ds = load_dataset(str(manifest))
    ref = encode_images(micro_encoder, ds.images, batch_size=4, num_workers=0, progress=False)
    got = encode_images(micro_encoder, ds.images, batch_size=4, num_workers=0, progress=False, cache=True)
    assert got.n_encoded == 0 and got.n_cached == n_img and np.array_equal(got.vectors, ref.vectors)
    ref_t = encode_texts(micro_encoder, ds.captions, progress=False)
    got_t = encode_texts(micro_encoder, ds.captions, progress=False, cache=True)
    assert got_t.n_encoded == 0 and np.array_equal(got_t.vectors, ref_t.vectors)
    assert np.array_equal(got_t.lengths, ref_t.lengths)


def test_run_failing_mid_encoding_resumes_without_redoing_finished_batches(micro_encoder, manifest, tmp_path):
    with pytest.raises(RuntimeError, match="simulated crash"):
        _run(Flaky(micro_encoder, fail_at=3), manifest, tmp_path / "crashed")
    assert not list((tmp_path / "crashed").glob("*.json")) if (tmp_path / "crashed").exists() else True
    resumed = _run(micro_encoder, manifest, tmp_path / "resumed")
    # batches 1 and 2 (4 images each) finished before the crash: only the last 4 images are encoded
    assert resumed.settings["encoding"]["encoded"]["images"] == 4
    assert resumed.settings["encoding"]["cached"]["images"] == 8
    plain = _run(micro_encoder, manifest, tmp_path / "plain", use_cache=False)
    _same_scores(resumed, plain, tmp_path / "resumed", tmp_path / "plain")


KILLED_CHILD = textwrap.dedent("""
    import sys, time, torch
    from hnbench.evaluation.cache import EmbeddingCache
    from hnbench.data import load_dataset
    from hnbench.evaluation.encode import encode_images
    from hnbench.models import load_model

    torch.manual_seed(0)
    enc = load_model("hnb-micro", model_config=sys.argv[1])
    forward = enc.encode_images
    def slow(pixels):
        time.sleep(0.5)
        return forward(pixels)
    enc.encode_images = slow
    ds = load_dataset(sys.argv[2])
    cache = EmbeddingCache.for_encoder(enc, sys.argv[3], shard_items=4)
    print("started", flush=True)
    encode_images(enc, ds.images, batch_size=4, num_workers=0, progress=False, cache=cache)
    print("finished", flush=True)
""")


@pytest.mark.slow
def test_process_killed_mid_encoding_resumes(micro_config, micro_encoder, tmp_path):
    pairs = make_pairs(tmp_path, n=32)
    manifest = write_jsonl(tmp_path / "m.jsonl", [{"image": p, "caption": c} for p, c in pairs])
    root = tmp_path / "emb"
    cache = EmbeddingCache.for_encoder(micro_encoder, root)
    script = tmp_path / "child.py"
    script.write_text(KILLED_CHILD)
    child = subprocess.Popen([sys.executable, str(script), str(micro_config), str(manifest), str(root)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while len(cache.images.shards()) < 3:
            assert child.poll() is None, f"child ended early: {child.communicate()}"
            assert time.monotonic() < deadline, "child wrote no shards in time"
            time.sleep(0.05)
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.kill()
        out, _ = child.communicate()
    assert child.returncode == -signal.SIGKILL and "finished" not in out
    done = sum(int(cache_mod.read_header(p)["n"]) for p in cache.images.shards())
    assert 12 <= done < 32
    ds = load_dataset(str(manifest))
    resumed = encode_images(micro_encoder, ds.images, batch_size=4, num_workers=0, progress=False, cache=cache)
    assert resumed.n_cached == done and resumed.n_encoded == 32 - done
    ref = encode_images(micro_encoder, ds.images, batch_size=4, num_workers=0, progress=False)
    assert np.array_equal(resumed.vectors, ref.vectors)
    again = encode_images(micro_encoder, ds.images, batch_size=4, num_workers=0, progress=False, cache=cache)
    assert again.n_encoded == 0


def test_tokenizing_in_workers_changes_nothing(micro_encoder):
    texts = [f"a caption number {i} " + "with more words " * (i % 5) for i in range(11)]
    ref = encode_texts(micro_encoder, texts, batch_size=3, num_workers=0, progress=False)
    par = encode_texts(micro_encoder, texts, batch_size=3, num_workers=2, progress=False)
    assert np.array_equal(ref.vectors, par.vectors) and np.array_equal(ref.lengths, par.lengths)
    assert np.array_equal(ref.lengths, micro_encoder.tokenize(texts).lengths)


def test_corrupt_shards_are_detected_quarantined_and_rebuilt(micro_encoder, manifest, tmp_path, caplog):
    root = tmp_path / "emb"
    first = _run(micro_encoder, manifest, tmp_path / "a", cache_dir=root)
    cache = EmbeddingCache.for_encoder(micro_encoder, root)
    (image_shard,), (text_shard,) = cache.images.shards(), cache.texts.shards()
    data = bytearray(image_shard.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one flipped byte inside the vectors
    image_shard.write_bytes(bytes(data))
    text_shard.write_bytes(text_shard.read_bytes()[:-40])  # truncated
    with caplog.at_level(logging.WARNING, logger="hnbench.evaluation.cache"):
        second = _run(micro_encoder, manifest, tmp_path / "b", cache_dir=root)
    assert sum("corrupt" in r.message for r in caplog.records) == 2
    enc = second.settings["encoding"]
    assert enc["corrupt_shards"] == 2
    assert enc["encoded"] == {"images": first.dataset["n_images"], "texts": first.dataset["n_captions"]}
    _same_scores(first, second, tmp_path / "a", tmp_path / "b")
    assert len(list((root / "quarantine").iterdir())) == 2
    third = _run(micro_encoder, manifest, tmp_path / "c", cache_dir=root)
    assert third.settings["encoding"]["encoded"] == {"images": 0, "texts": 0}
    assert third.settings["encoding"]["corrupt_shards"] == 0


def test_unwritable_cache_warns_and_loses_nothing(micro_encoder, manifest, tmp_path, monkeypatch, caplog):
    def disk_full(path, data):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(cache_mod, "atomic_write_bytes", disk_full)
    with caplog.at_level(logging.WARNING, logger="hnbench.evaluation.cache"):
        r = _run(micro_encoder, manifest, tmp_path / "full", cache_dir=tmp_path / "emb")
    assert sum("cannot write the embedding cache" in m.message for m in caplog.records) == 2  # images, texts
    plain = _run(micro_encoder, manifest, tmp_path / "plain", use_cache=False)
    _same_scores(r, plain, tmp_path / "full", tmp_path / "plain")


def test_keys_follow_content_and_model_settings(micro_encoder, tmp_path):
    pairs = make_pairs(tmp_path, n=6)
    write_jsonl(tmp_path / "m.jsonl", [{"image": p, "caption": c} for p, c in pairs])
    ds = load_dataset(str(tmp_path / "m.jsonl"))
    root = tmp_path / "emb"
    cache = EmbeddingCache.for_encoder(micro_encoder, root)
    encode_images(micro_encoder, ds.images, num_workers=0, progress=False, cache=cache)
    # the same bytes under other names and in another order are hits; changed bytes are not
    moved = tmp_path / "moved"
    moved.mkdir()
    for i, (p, _) in enumerate(reversed(pairs)):
        (moved / f"x{i}.png").write_bytes((tmp_path / p).read_bytes())
    (moved / "x0.png").write_bytes((tmp_path / pairs[0][0]).read_bytes()[:-1] + b"\0")  # other bytes
    write_jsonl(moved / "m.jsonl", [{"image": f"x{i}.png", "caption": f"c{i}"} for i in range(6)])
    again = encode_images(micro_encoder, load_dataset(str(moved / "m.jsonl")).images, num_workers=0,
                          progress=False, cache=cache)
    assert again.n_cached == 5 and again.n_encoded == 1
    # a caption repeated within a run is encoded once
    texts = ["a red square", "a blue square", "a red square"]
    t = encode_texts(micro_encoder, texts, progress=False, cache=cache)
    assert t.n_encoded == 2 and np.array_equal(t.vectors[0], t.vectors[2])
    # anything the embeddings depend on changes the model key
    info = micro_encoder.info
    base = cache_mod.model_spec(info, micro_encoder.image_transform)
    for change in [{"fingerprint": "0" * 16}, {"context_length": 16}, {"extra": {"precision": "bf16"}},
                   {"arch": "other"}]:
        assert cache_mod.model_spec(dataclasses.replace(info, **change), micro_encoder.image_transform) != base
    assert cache_mod.model_spec(info, micro_encoder.image_transform, autocast="bfloat16") != base
    assert cache_mod.model_spec(info, lambda im: im) != base
    assert " at 0x" not in cache_mod.model_spec(info, lambda im: im)["preprocess"]
    other = EmbeddingCache(root, {**cache.spec, "context_length": 16})
    assert other.key != cache.key and other.images.lookup(cache_mod.text_keys(["x"]))[0].sum() == 0


def test_cli_cache_ls_du_clear_and_eval_cache_dir(micro_config, tmp_path, capsys):
    pairs = make_pairs(tmp_path, n=5)
    path = write_jsonl(tmp_path / "m.jsonl", [{"image": p, "caption": c} for p, c in pairs])
    root = tmp_path / "emb"
    assert main(["-q", "eval", "--model", "hnb-micro", "--model-config", str(micro_config), "--dataset", str(path),
                 "--output", str(tmp_path / "out"), "--num-workers", "0", "--cache-dir", str(root)]) == 0
    capsys.readouterr()
    (key,) = [p.name for p in root.iterdir() if not p.name.startswith(".")]
    assert main(["cache", "ls", "--cache-dir", str(root)]) == 0
    out = capsys.readouterr().out
    assert key in out and "hnb-micro" in out and "| 5" not in out and " 5 " in out
    assert main(["cache", "du", "--cache-dir", str(root)]) == 0
    out = capsys.readouterr().out
    assert key in out and "total" in out
    assert main(["cache", "clear", "--cache-dir", str(root), "--model", "hnb-micro", "--kind", "text", "--yes"]) == 0
    assert "freed" in capsys.readouterr().out
    assert [r["text_items"] for r in cache_mod.list_models(root)] == [0]
    assert [r["image_items"] for r in cache_mod.list_models(root)] == [5]
    assert main(["cache", "clear", "--cache-dir", str(root), "--yes"]) == 0
    capsys.readouterr()
    assert main(["cache", "ls", "--cache-dir", str(root)]) == 0
    assert "no cached embeddings" in capsys.readouterr().out


def test_default_location_follows_hnbench_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("HNBENCH_CACHE", str(tmp_path / "hc"))
    assert cache_mod.default_root() == tmp_path / "hc" / "embeddings"
    monkeypatch.delenv("HNBENCH_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_mod.default_root() == tmp_path / "xdg" / "hnbench" / "embeddings"


def test_approximate_search_result_is_marked(micro_encoder, manifest, tmp_path):
    r = _run(micro_encoder, manifest, tmp_path / "approx", search="approximate")
    assert r.settings["search"] == "approximate" and r.settings["backend"] == "faiss-hnsw"
    assert set(r.settings["approximate"]) == {"t2i", "i2t"}
    assert 0 < r.settings["approximate"]["t2i"]["recall@k"] <= 1
    with pytest.raises(Exception, match="exact.*approximate"):
        _run(micro_encoder, manifest, tmp_path / "x", search="ivf")


@pytest.mark.gpu
def test_cuda_encoding_through_the_cache_matches_cpu(micro_config, manifest, tmp_path):
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    torch.manual_seed(0)
    cpu = load_model("hnb-micro", model_config=str(micro_config))
    gpu = load_model("hnb-micro", model_config=str(micro_config), device="cuda")
    gpu.model.load_state_dict(cpu.model.state_dict())
    ds = load_dataset(str(manifest))
    ref = encode_images(cpu, ds.images, batch_size=4, num_workers=0, progress=False)
    got = encode_images(gpu, ds.images, batch_size=4, num_workers=2, progress=False,
                        cache=EmbeddingCache.for_encoder(gpu, tmp_path / "emb"))  # pinned, non-blocking
    np.testing.assert_allclose(got.vectors, ref.vectors, atol=1e-4)
    txt = encode_texts(gpu, ds.captions, progress=False, cache=EmbeddingCache.for_encoder(gpu, tmp_path / "emb"))
    np.testing.assert_allclose(txt.vectors, encode_texts(cpu, ds.captions, progress=False).vectors, atol=1e-4)
    # the device is not part of the key: a CPU run reuses what the GPU encoded
    again = encode_images(cpu, ds.images, batch_size=4, num_workers=0, progress=False,
                          cache=EmbeddingCache.for_encoder(cpu, tmp_path / "emb"))
    assert again.n_encoded == 0


def test_image_keys_are_the_blake2b_of_each_sources_content_bytes(tmp_path):
    """The keys an existing cache was filled with: blake2b-128 of the file's bytes (files, HF rows that store
    bytes or name a file) or of ``"{mode}:{size}:"`` + pixels (sources that only decode)."""
    import datasets  # as the other tests do: the repository's datasets/ folder shares its name

    def blake(data: bytes) -> bytes:
        return hashlib.blake2b(data, digest_size=16).digest()

    pairs = make_pairs(tmp_path, n=6)
    paths = [str(tmp_path / p) for p, _ in pairs]
    raw = [Path(p).read_bytes() for p in paths]
    files = FileImages(paths, [f"i{k}" for k in range(6)])
    assert files.file_backed and [files.content_bytes(k) for k in range(6)] == raw
    many = list(range(6)) * 12  # over 64 positions: the threaded path
    keys, ok = cache_mod.image_keys(files, many)
    assert ok.all() and keys.tolist() == [blake(raw[k]) for k in many]

    ids = [f"i{k}" for k in range(6)]
    by_path = datasets.Dataset.from_dict({"image": paths}).cast_column("image", datasets.Image())
    by_bytes = datasets.Dataset.from_dict({"image": [{"bytes": b, "path": None} for b in raw]}).cast_column(
        "image", datasets.Image())
    for ds in (by_path, by_bytes):
        hf = HFImages(ds, "image", ids)
        keys, ok = cache_mod.image_keys(hf, range(6))
        assert not hf.file_backed and ok.all() and keys.tolist() == [blake(b) for b in raw]

    class Decoded(ImageSource):
        """A source that only hands out decoded images."""

        def __init__(self, images: list[Image.Image]):
            self.images, self.ids = images, [f"d{k}" for k in range(len(images))]

        def open(self, i: int) -> Image.Image:
            return self.images[i]

    images = [Image.open(p).convert("RGB") for p in paths[:3]]
    keys, ok = cache_mod.image_keys(Decoded(images), range(3))
    assert ok.all() and keys.tolist() == [blake(f"RGB:{im.size}:".encode() + im.tobytes()) for im in images]
    # the fingerprint and the cache keys both ask for the digests: a source reads and hashes each image once
    opened: list[int] = []

    class Counted(Decoded):
        def open(self, i: int) -> Image.Image:
            opened.append(i)
            return super().open(i)

    source = Counted(images)
    first = source.content_digests([0, 1, 2])
    assert source.content_digests([2, 0]) == [first[2], first[0]] and sorted(opened) == [0, 1, 2]
    (tmp_path / pairs[1][0]).unlink()  # unreadable: no key, never cached
    keys, ok = cache_mod.image_keys(files, range(3))
    assert ok.tolist() == [True, False, True] and keys[1] == b""
