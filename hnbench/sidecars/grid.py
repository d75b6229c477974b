"""``hnbench segments``: a segment sidecar for any data, without SAM.

Candidates are a fixed multi-scale grid of boxes (``--grids 2 3``: the 2x2 and 3x3 cells; ``--centre 0.5
0.75``: centred boxes of those fractions of each side; ``--whole``: the whole image too), the caption is
split into sentences (:func:`hnbench.sidecars.segments.split_sentences`), and a frozen CLIP (any hnbench
model) embeds every candidate crop and every sentence; each sentence takes its best box (arg-max cosine,
recorded as ``similarity_score``). synthdense's sidecar is exact (its geometry); ``--import-goal`` reads
GOAL's released JSON instead. The sidecar is written atomically with its parameters, and a file another
run (other data, model or parameters, or another GOAL file: an import is known by its sha256, not its name)
made is not replaced without ``--overwrite``.

``--grids N`` is at most :data:`~hnbench.sidecars.options.MAX_GRID` (checked before anything loads), and the
crops are streamed to the encoder a batch at a time, never all of an image's (or the data's) at once.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hnbench.errors import ConfigError, DataError
from hnbench.sidecars import SEGMENT_GEOMETRY
from hnbench.sidecars.options import SegmentsSettings

if TYPE_CHECKING:
    import torch

    from hnbench.data.base import ImageTextDataset
    from hnbench.models.base import Encoder
    from hnbench.sidecars.segments import Box, SegmentSidecar
    from hnbench.specs import DataSpec, ModelSpec


def candidate_boxes(width: int, height: int, settings: SegmentsSettings) -> list[Box]:
    """The candidate boxes of a ``width`` x ``height`` image, in pixels (duplicates dropped, order kept)."""
    boxes: list[Box] = [(0.0, 0.0, float(width), float(height))] if settings.whole else []
    for n in dict.fromkeys(settings.grids):
        for r in range(n):
            for c in range(n):
                boxes.append((width * c / n, height * r / n, width * (c + 1) / n, height * (r + 1) / n))
    for f in settings.centre:
        dx, dy = width * (1 - f) / 2, height * (1 - f) / 2
        boxes.append((dx, dy, width - dx, height - dy))
    return list(dict.fromkeys(boxes))


@dataclass
class _Scoring:
    """An image whose crops are being scored: its sentences' features and each sentence's best box so far."""

    caption: str
    size: tuple[int, int]
    spans: list[tuple[int, int]]
    boxes: list[Box]
    texts: torch.Tensor  # (sentences, dim)
    best: torch.Tensor  # (sentences,) the best cosine so far
    best_box: torch.Tensor  # (sentences,) its box's index
    left: int  # crops not scored yet


def grid_segments(dataset: ImageTextDataset, encoder: Encoder, settings: SegmentsSettings,
                  parameters: dict[str, Any], *, progress: bool = False) -> SegmentSidecar:
    """Score every candidate box of every image against each sentence of its (first) caption with
    ``encoder``; each sentence keeps its best box (the first of equal ones).

    The crops are streamed: made one at a time as the encoder takes them, ``settings.batch_size`` per batch
    (a batch may span images), each sentence keeping a running best; what is alive at once is one batch of
    crops and the sentence features of the images it touches, whatever ``--grids`` and the number of images."""
    import torch
    from tqdm import tqdm

    from hnbench.sidecars.segments import (
        ImageSegments,
        Segment,
        SegmentSidecar,
        crop_box,
        dataset_record,
        split_sentences,
    )

    first_caption: dict[int, str] = {}
    for text, k in zip(dataset.captions, dataset.caption_image.tolist()):
        first_caption.setdefault(k, text)
    images: dict[str, ImageSegments] = {}
    scoring: dict[int, _Scoring] = {}

    def finish(i: int, caption: str, size: tuple[int, int], segs: list[Segment]) -> None:
        segs.sort(key=lambda s: -s.similarity)
        image_id = dataset.image_ids[i]
        images[image_id] = ImageSegments(image_id, size[0], size[1], caption, tuple(segs))

    def crops() -> Iterator[tuple[int, torch.Tensor]]:
        """(image position, transformed crop) of every candidate box of every image, made as they are taken."""
        for i in tqdm(range(dataset.n_images), desc="segments", unit="img", disable=not progress):
            image = dataset.images.open(i)
            caption = first_caption[i]
            spans = split_sentences(caption)
            if not spans:
                finish(i, caption, image.size, [])
                continue
            boxes = candidate_boxes(*image.size, settings)
            texts = encoder.encode_texts(encoder.tokenize([caption[a:b] for a, b in spans]).tokens)
            scoring[i] = _Scoring(caption, image.size, spans, boxes, texts,
                                  torch.full((len(spans),), -torch.inf, device=texts.device),
                                  torch.zeros(len(spans), dtype=torch.long, device=texts.device), len(boxes))
            for box in boxes:
                yield i, encoder.image_transform(crop_box(image, box))

    stream = crops()
    while batch := list(islice(stream, settings.batch_size)):
        owners = [i for i, _ in batch]
        feats = encoder.encode_images(torch.stack([crop for _, crop in batch]))
        del batch  # the crops go before the next batch is made: one batch is alive at a time
        for i in dict.fromkeys(owners):  # an image's crops are contiguous in the stream, so in a batch
            s, start, n = scoring[i], owners.index(i), owners.count(i)
            value, where = (s.texts @ feats[start:start + n].T).max(dim=1)  # over these n of its boxes
            better = value > s.best  # strictly: an earlier box keeps a tie, as one argmax over all boxes does
            s.best = torch.where(better, value, s.best)
            s.best_box = torch.where(better, where + len(s.boxes) - s.left, s.best_box)
            s.left -= n
            if not s.left:
                del scoring[i]
                finish(i, s.caption, s.size, [
                    Segment(s.boxes[j], s.caption[a:b], (a, b), float(v))
                    for (a, b), j, v in zip(s.spans, s.best_box.tolist(), s.best.tolist())])
        del feats
    return SegmentSidecar("grid-clip", parameters, {image_id: images[image_id] for image_id in dataset.image_ids},
                          dataset_record(dataset))


def make_segments(data: DataSpec, model: ModelSpec | None, settings: SegmentsSettings, *,
                  progress: bool = False) -> Path:
    """Write the sidecar ``hnbench segments`` makes (checked, then written atomically); returns its path.

    Everything given is checked before any model loads: the settings, the output (another run's is not
    replaced), a model for data without its segments' geometry (:data:`~hnbench.sidecars.SEGMENT_GEOMETRY`: none is
    needed for synthdense or ``import_goal``; the data is loaded to ask it); a model whose family runs release
    code is refused unless ``model.trust_remote_code`` before the data loads."""
    import torch

    from hnbench.data import load_spec
    from hnbench.io import check_output, record_output, sha256_file
    from hnbench.models import load_model
    from hnbench.models.family import check_trusted
    from hnbench.sidecars.segments import (
        default_sidecar_path,
        import_goal,
        parse_segments,
        synthdense_segments,
    )

    settings.validate()
    data.validate()
    if settings.import_goal and not Path(settings.import_goal).is_file():
        raise ConfigError(f"--import-goal {settings.import_goal}: no such file")
    scorer = model if not settings.import_goal and model is not None and model.model else None
    if scorer is not None and scorer.model is not None:
        scorer.validate()
        check_trusted(scorer.model, scorer.pretrained, scorer.trust_remote_code)  # remote code: before anything loads
    ds = load_spec(data)
    # the data declares whether it holds its segments' geometry (synthdense): then no model scores boxes
    geometric = SEGMENT_GEOMETRY in ds.side_inputs and not settings.import_goal
    if not geometric and not settings.import_goal and scorer is None:
        raise ConfigError("hnbench segments scores boxes with a CLIP model: give --model (e.g. --model hnbench-tiny "
                          "--pretrained synthdense), or --import-goal FILE")
    out = Path(settings.output) if settings.output else default_sidecar_path(ds)
    writer = "synthdense" if geometric else "goal-import" if settings.import_goal else "grid-clip"
    parameters = settings.parameters(None if geometric or settings.import_goal else model)
    # an import is known by its content (sha256), not its name: another file of the same name is other input,
    # and a copy of the same file elsewhere is the same
    goal_sha256 = None
    if settings.import_goal:
        try:
            goal_sha256 = sha256_file(settings.import_goal)
        except OSError as e:
            raise ConfigError(f"--import-goal {settings.import_goal}: unreadable ({e.strerror or e})") from None
    inputs = {"writer": writer, "data": ds.fingerprint(), "parameters": parameters, "import_goal_sha256": goal_sha256}
    check_output(out, "a segment sidecar", inputs, overwrite=settings.overwrite)
    if geometric:
        sidecar = synthdense_segments(ds)
    elif settings.import_goal:
        sidecar = import_goal(settings.import_goal, ds)
        if sidecar.parameters["sha256"] != goal_sha256:
            raise DataError(f"--import-goal {settings.import_goal}: the file changed while it was read; run again")
    else:
        assert model is not None and model.model is not None
        encoder = load_model(model.model, model.pretrained, model_config=model.model_config,
                             context_length=model.context_length, device=settings.device,
                             trust_remote_code=model.trust_remote_code)
        with torch.inference_mode():
            sidecar = grid_segments(ds, encoder, settings, parameters, progress=progress)
    parse_segments(sidecar.to_json(), str(out), ds)  # what is written reads back
    record_output(out, inputs)
    return sidecar.write(out)
