"""Issue 20 ("Nothing lost, round 3"), part B: data, evaluation input and model loading.

Each test names its item; CLI cases assert the exact outcome: status 2, one ``hnbench: error:`` line
naming the offending item, no traceback, nothing written.
"""

from __future__ import annotations

import builtins
import json
from pathlib import Path

import pytest
from conftest import assert_one_line_error, snapshot, write_jsonl
from PIL import Image

from hnbench.data import load_dataset
from hnbench.evaluate import evaluate
from hnbench.models import load_model
from hnbench.results import read_result

COLOURS = [(200, 30, 30), (30, 200, 30), (30, 30, 200), (220, 220, 40)]


def _same_size_set(root: Path, shift: int) -> Path:
    """A manifest ``m.jsonl`` with four 8x8 BMPs (a fixed file size whatever the pixels) coloured by ``shift``."""
    (root / "images").mkdir(parents=True)
    rows = []
    for i in range(len(COLOURS)):
        Image.new("RGB", (8, 8), COLOURS[(i + shift) % len(COLOURS)]).save(root / "images" / f"{i}.bmp")
        rows.append({"image": f"images/{i}.bmp", "caption": f"picture number {i}"})
    return write_jsonl(root / "m.jsonl", rows)


@pytest.fixture
def micro(micro_config):
    return load_model("hnb-micro", model_config=str(micro_config))


# --- item 3: the data fingerprint hashes the images' bytes ----------------------------------------
def test_item3_same_named_same_size_images_with_other_pixels_get_two_result_files(tmp_path, micro):
    a, b = _same_size_set(tmp_path / "a", 0), _same_size_set(tmp_path / "b", 1)
    assert [p.stat().st_size for p in sorted((tmp_path / "a/images").iterdir())] == \
        [p.stat().st_size for p in sorted((tmp_path / "b/images").iterdir())]
    out = tmp_path / "out"
    first = evaluate(micro, str(a), output_dir=out, num_workers=0, ci=False)
    kept = snapshot(out)
    second = evaluate(micro, str(b), output_dir=out, num_workers=0, ci=False)
    assert first.dataset["fingerprint"] != second.dataset["fingerprint"]
    after = snapshot(out)
    jsons = sorted(k for k in after if k.endswith(".json") and not k.startswith("."))
    assert len(jsons) == 2 and all(after[k] == v for k, v in kept.items())  # the first result is untouched
    assert {read_result(out / j).dataset["fingerprint"] for j in jsons} == {first.dataset["fingerprint"],
                                                                            second.dataset["fingerprint"]}


def test_item3_a_warm_rerun_reads_no_image_bytes(tmp_path, micro, monkeypatch):
    manifest = _same_size_set(tmp_path / "a", 0)
    images = str(tmp_path / "a" / "images")
    first = evaluate(micro, str(manifest), output_dir=tmp_path / "out", num_workers=0, ci=False)
    reads: list[str] = []
    real_open = builtins.open

    def counting_open(file, *args, **kwargs):  # a spy: every open still happens
        if str(file).startswith(images):
            reads.append(str(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", counting_open)
    again = evaluate(micro, str(manifest), output_dir=tmp_path / "out", num_workers=0, ci=False)
    monkeypatch.undo()
    assert reads == [] and again.dataset["fingerprint"] == first.dataset["fingerprint"]
    assert again.settings["encoding"]["cached"]["images"] == len(COLOURS)

    # a file rewritten with other pixels (same name, same size) is read again and changes the fingerprint
    Image.new("RGB", (8, 8), (1, 2, 3)).save(tmp_path / "a" / "images" / "0.bmp")
    changed = load_dataset(str(manifest)).fingerprint()
    assert changed != first.dataset["fingerprint"]
