"""``hnbench.evaluation.evaluate`` takes the data options as keywords (``name=``, ``allow_outside_paths=``, a task's
``class_names=``, ...) beside its settings: the dataclasses' fields decide which keyword goes where.

Real runs of the micro open_clip model on a real 12-image manifest.
"""

from __future__ import annotations

import json

import pytest
from conftest import make_pairs, write_jsonl

import hnbench
from hnbench.errors import ConfigError, DataError
from hnbench.settings import EvalSettings
from hnbench.specs import DataSpec, data_keywords, split_keywords

QUICK = {"num_workers": 0, "ci": False, "progress": False}


@pytest.fixture
def manifest(tmp_path):
    pairs = make_pairs(tmp_path)
    return write_jsonl(tmp_path / "captions.jsonl", [{"image": p, "caption": c} for p, c in pairs])


def test_name_given_to_evaluate_labels_the_data_in_the_result(manifest, micro_config, tmp_path):
    r = hnbench.evaluate("hnb-micro", manifest, model_config=str(micro_config), output_dir=tmp_path / "out",
                         name="my-set", **QUICK)
    assert r.dataset["name"] == "my-set" and r.dataset["spec"]["name"] == "my-set"
    assert json.loads(open(r.path).read())["dataset"]["name"] == "my-set"  # written as returned
    assert r.dataset["n_images"] == 12


def test_allow_outside_paths_given_to_evaluate_reaches_the_manifest_loader(tmp_path, micro_config):
    pairs = make_pairs(tmp_path)
    (tmp_path / "sub").mkdir()
    outside = write_jsonl(tmp_path / "sub" / "up.jsonl", [{"image": f"../{p}", "caption": c} for p, c in pairs])
    with pytest.raises(DataError, match="points outside"):
        hnbench.evaluate("hnb-micro", outside, model_config=str(micro_config), **QUICK)
    r = hnbench.evaluate("hnb-micro", outside, model_config=str(micro_config), allow_outside_paths=True, **QUICK)
    assert r.dataset["n_images"] == 12 and r.dataset["spec"]["allow_outside_paths"] is True


def test_a_task_data_option_given_as_keyword_is_checked_as_its_flag(manifest):
    with pytest.raises(ConfigError, match="--class-names is read by --task zeroshot only"):
        hnbench.evaluate("no-such-arch", manifest, class_names="names.txt")


def test_a_data_option_the_data_does_not_read_is_refused_before_loading(manifest):
    with pytest.raises(ConfigError, match="--split-file is not read by"):
        hnbench.evaluate("no-such-arch", manifest, split_file="DCI_test.json")


def test_an_unknown_keyword_suggests_the_data_option_and_names_dataset_options(manifest):
    with pytest.raises(TypeError, match="did you mean 'name'") as e:
        hnbench.evaluate("no-such-arch", manifest, nmae="x")
    assert "dataset_options" in str(e.value)


def test_a_data_option_given_twice_with_two_values_is_refused(manifest):
    with pytest.raises(ConfigError, match="name is given twice"):
        hnbench.evaluate("no-such-arch", manifest, name="a", dataset_options={"name": "b"})


def test_data_options_with_loaded_data_are_refused_not_dropped(manifest, micro_config):
    ds = hnbench.load_dataset(manifest)
    with pytest.raises(ConfigError, match="name: data options apply to a dataset given by name or path"):
        hnbench.evaluate("hnb-micro", ds, model_config=str(micro_config), name="x", **QUICK)


def test_the_keywords_are_sorted_by_the_dataclasses_fields():
    data = data_keywords()
    assert set(data) >= {f for f in DataSpec.__dataclass_fields__ if f != "dataset"} and "dataset" not in data
    assert "class_names" in data and "label_column" in data  # zero-shot's own data options
    settings, options = split_keywords({"seed": 3, "name": "x", "skip_invalid": True, "split_file": ["a"]},
                                       EvalSettings, {"allow_count_mismatch": True})
    assert settings == {"seed": 3, "skip_invalid": True}  # skip_invalid: a setting, passed on to the data
    assert options == {"allow_count_mismatch": True, "name": "x", "split_file": ["a"]}
    assert split_keywords({"seed": 3}, EvalSettings, None) == ({"seed": 3}, None)


def test_name_given_to_hardness_labels_the_caption_set_and_unknown_keywords_name_dataset_options(manifest):
    report = hnbench.hardness(manifest, "hnbench-tiny", name="my-set", n_batches=2, batch_size=4, progress=False)
    assert report.dataset["name"] == "my-set" and report.dataset["spec"]["name"] == "my-set"
    with pytest.raises(TypeError, match="dataset_options"):
        hnbench.hardness(manifest, "hnbench-tiny", nmae="x")
    with pytest.raises(ConfigError, match="not to a caption file"):
        hnbench.hardness(str(manifest.with_suffix(".txt")), "hnbench-tiny", name="x")
    with pytest.raises(ConfigError, match="loaded already"):
        hnbench.hardness(["a red cube", "a blue cube"], "hnbench-tiny", name="x")


def test_hardness_reads_a_data_set_given_as_a_path_object(manifest):
    report = hnbench.hardness(manifest, "hnbench-tiny", n_batches=2, batch_size=4, progress=False)  # a PosixPath
    assert report.dataset["n_captions"] == 12
