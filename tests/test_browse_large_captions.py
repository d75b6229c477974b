"""A huge caption never stalls a page: the word diff aligns captions of at most ``MAX_WORDS`` words (longer ones
are shown plain), and the browse page shows a caption up to ``MAX_CAPTION_CHARS`` characters (a longer one cut,
its left-out length said), so a page's size does not grow with a caption's length."""

from __future__ import annotations

import json

from conftest import make_pairs, write_jsonl

from hnbench.cli import main
from hnbench.hardness.markdown import pair_block
from hnbench.hardness.schema import Pair
from hnbench.pages.build import browse
from hnbench.pages.html import render
from hnbench.pages.page import Page, Row
from hnbench.pages.textdiff import (
    MAX_CAPTION_CHARS,
    MAX_WORDS,
    changed_words,
    diff_words,
    diffable,
    near_duplicates,
    similarity,
)

SENTENCE = "a red square of size 16 on a dark background with a thin line"
HUGE = " ".join([SENTENCE] * 80_000)  # about 5 MB, 1.1 million words of 13 repeated ones: difflib's worst case


def _words(n: int, last: str) -> str:
    return " ".join(f"w{i % 50}" for i in range(n - 1)) + f" {last}"


def test_captions_over_the_word_bound_are_shown_plain_and_not_compared():
    at_bound = (_words(MAX_WORDS, "red"), _words(MAX_WORDS, "green"))
    assert diffable(*at_bound) and changed_words(*at_bound) == (["red"], ["green"])
    over = (_words(MAX_WORDS + 1, "red"), _words(MAX_WORDS + 1, "green"))
    assert not diffable(*over) and similarity(*over) is None and not near_duplicates(*over)
    assert changed_words(*over) == ([], [])
    # a 5 MB caption against itself and a near-duplicate: plain, and each side whole in one segment
    (sa, sb) = diff_words(HUGE, HUGE.replace("red", "blue", 1))
    assert sa == [(HUGE, False)] and sb == [(HUGE.replace("red", "blue", 1), False)]


def test_the_hardness_report_says_a_long_pair_was_not_compared():
    block = pair_block(1, Pair(0, 1, "a", "b", 0.99, HUGE, HUGE.replace("red", "blue", 1)))
    assert f"not marked (a caption of more than {MAX_WORDS:,} words: not compared)" in block
    quoted = [line for line in block.splitlines() if line.startswith("   >")]
    assert len(quoted) == 3 and not any("**" in line for line in quoted)  # both captions plain, no word in bold


def _page(caption: str) -> str:
    """A page of one t2i and one i2t query whose texts are all ``caption`` (ten retrieved captions)."""
    items = [{"id": f"c{i}", "image": None, "positive": i == 0, "text": caption, "score": 0.5} for i in range(10)]
    rows = [Row(direction="t2i", query_id="q0", rank=2, margin=0.1, query_image=None, query_text=caption,
                gt_image="im0", items=[{"id": "im1", "image": "im1", "positive": False, "text": caption, "score": 0.6}],
                confuser_text=caption),
            Row(direction="i2t", query_id="im0", rank=3, margin=0.2, query_image="im0", query_text=caption,
                gt_image=None, items=items, confuser_text=caption)]
    page = Page(title="t", models=[{"label": "m", "metrics": {}, "ci95": {}, "result": "r.json"}], rows=rows,
                thumbs={"im0": "data:,", "im1": "data:,"}, counts={"t2i": 1, "i2t": 1})
    return render(page)


def test_a_page_does_not_grow_with_a_caption_past_the_bound():
    sizes = {n: len(_page((SENTENCE + " ") * n)) for n in (2_000, 20_000, 80_000)}  # 122 kB to 5 MB captions
    # every caption cut at the same place: the pages differ only in the digits of "N more characters"
    assert max(sizes.values()) - min(sizes.values()) < 100
    shown = _page(HUGE)
    assert HUGE[:MAX_CAPTION_CHARS] in shown and HUGE[:MAX_CAPTION_CHARS + 1] not in shown
    # every place it is shown: the t2i query and its wrong image's caption, the i2t true caption and ten retrieved
    assert shown.count(f"… {len(HUGE) - MAX_CAPTION_CHARS:,} more characters not shown") == 13
    assert "<mark>" not in shown.split("<tbody>")[1]


def test_a_page_below_the_bound_shows_every_caption_whole():
    caption = (SENTENCE + " ") * 100  # 6.3 kB
    shown = _page(caption)
    assert "more characters not shown" not in shown and shown.count(caption.strip()) == 13


def test_browse_builds_a_page_of_a_set_with_a_five_megabyte_caption(tmp_path, micro_config):
    pairs = make_pairs(tmp_path, n=8)
    rows = [{"image": p, "caption": HUGE if i == 0 else c} for i, (p, c) in enumerate(pairs)]
    data = write_jsonl(tmp_path / "big.jsonl", rows)
    assert main(["-q", "eval", "--model", "hnb-micro", "--model-config", str(micro_config), "--dataset", str(data),
                 "--output", str(tmp_path / "res"), "--num-workers", "0", "--no-cache", "--no-ci", "--k", "1",
                 "5"]) == 0
    (result,) = (tmp_path / "res").glob("*.json")
    html = browse(result, tmp_path / "page", limit=0, top=5, progress=False).read_text()
    assert html.count('class="query"') == 16
    assert HUGE[:MAX_CAPTION_CHARS] in html and HUGE[:MAX_CAPTION_CHARS + 1] not in html
    cut = f"… {len(HUGE) - MAX_CAPTION_CHARS:,} more characters not shown"
    assert html.count(cut) >= 2  # at least its t2i query row and its image's i2t row
    assert len(html.encode()) < (html.count(cut) + 1) * MAX_CAPTION_CHARS + 500_000  # not a copy per row
    assert json.loads((tmp_path / "page" / ".index.html.inputs.json").read_text())["limit"] == 0
