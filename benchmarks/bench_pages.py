"""Browse pages of 2,000 and 5,000 queries and the HTML leaderboard: bytes, and time to ``data-ready`` in
headless Chromium.

Each size is its own manifest of N / 2 photo-like images (smooth random colour fields with a shape,
320 × 240 JPEG, so their thumbnails cost what a photograph's would) with one caption each: N / 2 t2i
and N / 2 i2t query rows, every one on the page (``--limit 0``, top 5). They are scored by the packaged
``hnbench-tiny`` model on the CPU. Chromium opens each page from file://
(``--headless --dump-dom``, no virtual time); a probe script appended to a copy of the page, which runs
right after the page's own script, reads ``performance.now()`` (milliseconds since navigation start: the
file read, HTML parse, the inline script filling thumbnails and wiring sort, filter and zoom). The
process's wall time (start to DOM dump, including Chromium's own start-up) is shown beside it, with the
median of ``--repeats`` loads.

Usage: python benchmarks/bench_pages.py --queries 2000 5000 --repeats 3
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFilter

from hnbench.cli import main as hnbench
from hnbench.pages.build import browse

PROBE = "<script>document.body.dataset.t = String(performance.now());</script>"


def _manifest(root: Path, n: int, seed: int = 0) -> Path:
    """``n`` photo-like JPEGs (blurred colour noise with an ellipse) and a caption each."""
    rng = np.random.default_rng(seed)
    (root / "images").mkdir(parents=True)
    lines = []
    for i in range(n):
        field = rng.integers(0, 255, size=(12, 16, 3), dtype=np.uint8)
        im = Image.fromarray(field).resize((320, 240), Image.Resampling.BICUBIC)
        x, y = (int(v) for v in rng.integers(20, 200, size=2))
        colour = tuple(int(v) for v in rng.integers(0, 255, size=3))
        ImageDraw.Draw(im).ellipse((x, y, x + 80, y + 50), fill=colour)
        im.filter(ImageFilter.GaussianBlur(1)).save(root / "images" / f"{i:05d}.jpg", quality=85)
        caption = (f"a photograph of a coloured ellipse ({colour[0]}, {colour[1]}, {colour[2]}) at {x}, {y} over a "
                   f"soft field of colour, item {i}")
        lines.append(json.dumps({"image": f"images/{i:05d}.jpg", "caption": caption}))
    path = root / "data.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def _chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if shutil.which(name):
            return str(shutil.which(name))
    raise SystemExit("no headless Chromium on PATH (apt-get install chromium)")


def _time_to_ready(page: Path, repeats: int) -> tuple[float, float, int]:
    """Median ms to the probe after the page's script, median wall seconds of the load, rows in the DOM."""
    copy = page.with_name("probed-" + page.name)
    text = page.read_text()
    cut = text.rindex("</body>")
    copy.write_text(text[:cut] + PROBE + text[cut:])
    ms, wall, rows = [], [], 0
    for _ in range(repeats):
        with tempfile.TemporaryDirectory() as profile:
            start = time.perf_counter()
            run = subprocess.run([_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                                  f"--user-data-dir={profile}", "--window-size=1400,900", "--dump-dom",
                                  copy.resolve().as_uri()], capture_output=True, text=True, timeout=600, check=True)
            wall.append(time.perf_counter() - start)
        body = re.search(r"<body[^>]*>", run.stdout)
        assert body and 'data-ready="1"' in body.group(0), f"{page}: the page's script did not finish"
        ms.append(float(re.search(r'data-t="([0-9.]+)"', body.group(0)).group(1)))  # type: ignore[union-attr]
        rows = run.stdout.count('<tr class="query"')
    copy.unlink()
    return float(np.median(ms)), float(np.median(wall)), rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--queries", type=int, nargs="+", default=[2000, 5000])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--work-dir", default=None, help="keep the data, results and pages here (default: a temp dir); "
                                                     "a folder of an earlier run is reused without re-scoring")
    args = ap.parse_args()
    work = Path(args.work_dir or tempfile.mkdtemp(prefix="bench_pages_"))
    print("| page | queries | thumbnails | bytes | of which thumbnails | ms to data-ready | wall s (load) |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for n in args.queries:
        root = work / f"q{n}"
        start = time.perf_counter()
        if not (root / "res").is_dir():  # a --work-dir of an earlier run keeps its data and results
            data = _manifest(root, n // 2)
            assert hnbench(["-q", "eval", "--model", "hnbench-tiny", "--pretrained", "synthdense", "--dataset",
                            str(data), "--output", str(root / "res"), "--num-workers", "0", "--no-cache"]) == 0
        (result,) = (root / "res").glob("*.json")
        scored = time.perf_counter() - start
        start = time.perf_counter()
        page = browse(result, root / "page", limit=0, progress=False, overwrite=True)
        built = time.perf_counter() - start
        text = page.read_text()
        thumbs = text.count("data:image/jpeg;base64,")
        thumb_bytes = sum(len(m) for m in re.findall(r'"data:image/jpeg;base64,[^"]*"', text))
        ms, wall, rows = _time_to_ready(page, args.repeats)
        print(f"| browse (data and eval {scored:.0f} s, page built in {built:.1f} s) | {rows:,} | {thumbs:,} | "
              f"{page.stat().st_size:,} | {thumb_bytes:,} | {ms:.0f} | {wall:.1f} |")
    board = work / "board" / "index.html"
    assert hnbench(["-q", "leaderboard", str(work), "--format", "html", "--ci", "--output", str(board),
                    "--overwrite"]) == 0
    ms, wall, _ = _time_to_ready(board, args.repeats)
    print(f"| leaderboard (--ci, {len(args.queries)} results) | – | – | {board.stat().st_size:,} | – | {ms:.0f} | "
          f"{wall:.1f} |")
    print(f"(work dir: {work})")


if __name__ == "__main__":
    main()
