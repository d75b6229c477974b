"""A DataLoader worker that dies or cannot hand over its batch is one clear error, not a hang.

Faults are injected inside the workers only (``get_worker_info()`` is set there): one worker exits
(``os._exit``), the other hits a file-size limit while writing its batch to shared memory, which is
what ``ulimit -f`` or a full ``/dev/shm`` does. Each run is a subprocess with a timeout, so a hang
fails the test instead of stalling the suite.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import make_pairs, write_jsonl

from hnbench.data import load_dataset
from hnbench.data.base import FileImages
from hnbench.errors import WorkerError
from hnbench.evaluation.encode import encode_images
from hnbench.models import load_model

REPO = Path(__file__).resolve().parent.parent

SCRIPT = """
import os, resource, sys
import torch
from hnbench.cli import main
from hnbench.data import load_dataset
from hnbench.data.base import FileImages
from hnbench.registry import DATASETS

mode, manifest, config, out = sys.argv[1:5]

class Faulty(FileImages):
    def open(self, i):
        if torch.utils.data.get_worker_info() is not None:  # only inside a worker
            if mode == "exit":
                os._exit(3)
            # the batch written to shared memory next exceeds this: the send fails with EFBIG
            resource.setrlimit(resource.RLIMIT_FSIZE, (1024, resource.RLIM_INFINITY))
        return super().open(i)

def faulty_set(**_):
    ds = load_dataset(manifest)
    ds.images = Faulty(ds.images.paths, ds.images.ids)
    return ds

DATASETS.register("faulty-set", faulty_set)
sys.exit(main(["-q", "eval", "--model", "hnb-micro", "--model-config", config, "--dataset", "faulty-set",
               "--output", out, "--num-workers", "2", "--batch-size", "2", "--no-cache"]))
"""


@pytest.fixture
def manifest(tmp_path) -> Path:
    pairs = make_pairs(tmp_path, n=8)
    return write_jsonl(tmp_path / "m.jsonl", [{"image": p, "caption": c} for p, c in pairs])


@pytest.mark.parametrize("mode", ["exit", "send-fails"])
def test_worker_death_is_one_line_naming_shared_memory(tmp_path, manifest, micro_config, mode):
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    try:
        run = subprocess.run([sys.executable, "-c", SCRIPT, mode, str(manifest), str(micro_config), str(out)],
                             capture_output=True, text=True, env=env, timeout=120)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{mode}: eval hung on a failed DataLoader worker")
    errors = [line for line in run.stderr.splitlines() if line.startswith("hnbench: error")]
    assert run.returncode == 2 and len(errors) == 1, run.stderr
    assert "Traceback" not in run.stderr
    assert "shared memory" in errors[0] and "--num-workers 0" in errors[0] and "--shm-size" in errors[0]
    assert not out.exists()


class _ExitingWorker(FileImages):
    def open(self, i):
        import torch

        if torch.utils.data.get_worker_info() is not None:
            os._exit(3)
        return super().open(i)


def test_encode_images_raises_worker_error_and_num_workers_0_works(manifest, micro_config):
    ds = load_dataset(str(manifest))
    source = _ExitingWorker(ds.images.paths, ds.images.ids)
    encoder = load_model("hnb-micro", model_config=str(micro_config))
    with pytest.raises(WorkerError, match="exited unexpectedly"):
        encode_images(encoder, source, batch_size=2, num_workers=2, progress=False)
    # the advice given works: in the main process the same source decodes fine
    emb = encode_images(encoder, source, batch_size=2, num_workers=0, progress=False)
    assert emb.vectors.shape == (8, 32) and not emb.bad


def test_an_items_own_error_in_a_worker_is_not_blamed_on_shared_memory(micro_config):
    import torch

    from hnbench.evaluation.encode import encode_texts

    encoder = load_model("hnb-micro", model_config=str(micro_config))
    real = encoder.tokenize

    def tokenize(texts):
        if torch.utils.data.get_worker_info() is not None:
            raise RuntimeError("tokenizer exploded")
        return real(texts)

    encoder.tokenize = tokenize
    with pytest.raises(RuntimeError, match="tokenizer exploded") as caught:
        encode_texts(encoder, [f"caption {i}" for i in range(8)], batch_size=2, num_workers=2, progress=False)
    assert not isinstance(caught.value, WorkerError)


def test_default_workers_leave_the_cpu_forward_its_cores():
    """On the CPU, default decoding workers use only the cores torch's own threads leave free."""
    import torch

    from hnbench.evaluation.encode import default_num_workers

    cores = len(os.sched_getaffinity(0))
    saved = torch.get_num_threads()
    try:
        for threads in (1, cores):
            torch.set_num_threads(threads)
            cpu = default_num_workers("cpu")
            assert 0 <= cpu <= 8 and cpu + threads <= max(cores, threads)
            assert cpu == min(8, cores - threads)  # every free core still decodes
            assert default_num_workers("cuda") == min(8, cores)  # beside an accelerator, all of them
    finally:
        torch.set_num_threads(saved)
