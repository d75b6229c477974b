"""A published-results CSV is checked when it is read through the Python API (``reported_rows``,
``load_published``): a ``nan`` metric, text, a number outside 0–100, an unknown direction or protocol, or a
missing column is one :class:`~hnbench.errors.DataError` line naming each bad cell by file and line."""

from __future__ import annotations

import math

import pytest

from hnbench.errors import HnbenchError
from hnbench.results.reported import PUBLISHED_CSV, check_published, load_published, reported_rows

HEADER = "source,protocol,method,backbone,training,benchmark,direction,R@1,R@5,R@10,note\n"
GOOD_T2I = "s,zero-shot-splits,CLIP,ViT-B/16,zero-shot,docci,t2i,57.1,,,\n"
GOOD_I2T = "s,zero-shot-splits,CLIP,ViT-B/16,zero-shot,docci,i2t,60.6,80.5,,a note\n"


def _one_line(excinfo: pytest.ExceptionInfo[HnbenchError]) -> str:
    text = str(excinfo.value)
    assert "\n" not in text and "Traceback" not in text
    return text


@pytest.mark.parametrize("cell", ["nan", "NaN", "inf", "-inf", "high", "-1", "100.5"])
def test_a_metric_that_is_no_percentage_is_one_line_naming_its_cell(tmp_path, cell):
    path = tmp_path / "published.csv"
    path.write_text(HEADER + GOOD_T2I + GOOD_I2T.replace("80.5", cell))
    for read in (reported_rows, load_published):
        with pytest.raises(HnbenchError) as excinfo:
            read(path)
        line = _one_line(excinfo)
        assert line.startswith(f"{path}:3: R@5 {cell!r} is not a percentage") and "empty" in line


def test_every_bad_cell_of_a_file_is_named_at_once(tmp_path):
    path = tmp_path / "published.csv"
    path.write_text(HEADER + GOOD_T2I.replace("57.1", "nan") + GOOD_I2T.replace("i2t", "sideways")
                    + GOOD_T2I.replace("zero-shot-splits", "no-such-protocol"))
    with pytest.raises(HnbenchError) as excinfo:
        reported_rows(path)
    line = _one_line(excinfo)
    assert "3 problems" in line and f"{path}:2: R@1 'nan'" in line
    assert f"{path}:3: direction 'sideways'" in line and f"{path}:4: protocol 'no-such-protocol'" in line


def test_a_file_without_the_columns_is_refused_by_name(tmp_path):
    path = tmp_path / "published.csv"
    path.write_text("source,method,R@1\ns,CLIP,50\n")
    with pytest.raises(HnbenchError) as excinfo:
        load_published(path)
    assert "no protocol, backbone, training, benchmark, direction columns" in _one_line(excinfo)
    other = tmp_path / "published.json"
    other.write_text("{}")
    with pytest.raises(HnbenchError, match="a CSV file"):
        load_published(other)


def test_empty_metric_cells_are_missing_numbers_and_the_packaged_file_passes(tmp_path):
    check_published(PUBLISHED_CSV)
    path = tmp_path / "published.csv"
    path.write_text(HEADER + GOOD_T2I + GOOD_I2T.replace(",80.5,", ", ,"))  # a blank of one space: not reported
    rows = reported_rows(path)
    assert len(rows) == 1
    row = rows.iloc[0]
    assert (row["t2i R@1"], row["i2t R@1"]) == (57.1, 60.6)
    assert all(math.isnan(row[c]) for c in ("t2i R@5", "t2i R@10", "i2t R@5", "i2t R@10"))
