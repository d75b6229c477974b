"""``hnbench segments``: a segment sidecar for any data, without SAM.

Candidates are a fixed multi-scale grid of boxes (``--grids 2 3``: the 2x2 and 3x3 cells; ``--centre 0.5
0.75``: centred boxes of those fractions of each side; ``--whole``: the whole image too), the caption is
split into sentences (:func:`hnbench.sidecars.segments.split_sentences`), and a frozen CLIP (any hnbench
model) embeds every candidate crop and every sentence; each sentence takes its best box (arg-max cosine,
recorded as ``similarity_score``). synthdense's sidecar is exact (its geometry); ``--import-goal`` reads
GOAL's released JSON instead. The sidecar is written atomically with its parameters, and a file another
run (other data, model or parameters) made is not replaced without ``--overwrite``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from hnbench.errors import ConfigError
from hnbench.sidecars.options import SegmentsSettings

if TYPE_CHECKING:
    from hnbench.data.base import ImageTextDataset
    from hnbench.models.base import Encoder
    from hnbench.sidecars.segments import Box, SegmentSidecar
    from hnbench.specs import DataSpec, ModelSpec


def candidate_boxes(width: int, height: int, settings: SegmentsSettings) -> list[Box]:
    """The candidate boxes of a ``width`` x ``height`` image, in pixels (duplicates dropped, order kept)."""
    boxes: list[Box] = [(0.0, 0.0, float(width), float(height))] if settings.whole else []
    for n in settings.grids:
        for r in range(n):
            for c in range(n):
                boxes.append((width * c / n, height * r / n, width * (c + 1) / n, height * (r + 1) / n))
    for f in settings.centre:
        dx, dy = width * (1 - f) / 2, height * (1 - f) / 2
        boxes.append((dx, dy, width - dx, height - dy))
    return list(dict.fromkeys(boxes))


def grid_segments(dataset: ImageTextDataset, encoder: Encoder, settings: SegmentsSettings,
                  parameters: dict[str, Any], *, progress: bool = False) -> SegmentSidecar:
    """Score every candidate box of every image against each sentence of its (first) caption with
    ``encoder``; each sentence keeps its best box."""
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
    images = {}
    for i in tqdm(range(dataset.n_images), desc="segments", unit="img", disable=not progress):
        image = dataset.images.open(i)
        caption = first_caption[i]
        spans = split_sentences(caption)
        boxes = candidate_boxes(*image.size, settings)
        segs: list[Segment] = []
        if spans:
            crops = [encoder.image_transform(crop_box(image, b)) for b in boxes]
            feats = torch.cat([encoder.encode_images(torch.stack(crops[j:j + settings.batch_size]))
                               for j in range(0, len(crops), settings.batch_size)])
            sentences = [caption[a:b] for a, b in spans]
            sims = (encoder.encode_texts(encoder.tokenize(sentences).tokens) @ feats.T).cpu()
            best = sims.argmax(dim=1).tolist()
            segs = [Segment(boxes[j], s, span, float(sims[k, j])) for k, (j, s, span)
                    in enumerate(zip(best, sentences, spans))]
            segs.sort(key=lambda s: -s.similarity)
        images[dataset.image_ids[i]] = ImageSegments(dataset.image_ids[i], image.size[0], image.size[1], caption,
                                                     tuple(segs))
    return SegmentSidecar("grid-clip", parameters, images, dataset_record(dataset))


def make_segments(data: DataSpec, model: ModelSpec | None, settings: SegmentsSettings, *,
                  progress: bool = False) -> Path:
    """Write the sidecar ``hnbench segments`` makes (checked, then written atomically); returns its path.

    Everything given is checked before any model loads: the settings, the output (another run's is not
    replaced), a model for real data (none is needed for synthdense or ``import_goal``); a model whose family runs
    release code is refused unless ``model.trust_remote_code`` before the data loads."""
    import torch

    from hnbench.data import load_spec
    from hnbench.io import check_output, record_output
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
    geometric = data.dataset == "synthdense" and not settings.import_goal
    if not geometric and not settings.import_goal and (model is None or not model.model):
        raise ConfigError("hnbench segments scores boxes with a CLIP model: give --model (e.g. --model hnbench-tiny "
                          "--pretrained synthdense), or --import-goal FILE")
    if settings.import_goal and not Path(settings.import_goal).is_file():
        raise ConfigError(f"--import-goal {settings.import_goal}: no such file")
    if not geometric and not settings.import_goal and model is not None and model.model:
        model.validate()
        check_trusted(model.model, model.pretrained, model.trust_remote_code)  # remote code: before anything loads
    ds = load_spec(data)
    out = Path(settings.output) if settings.output else default_sidecar_path(ds)
    writer = "synthdense" if geometric else "goal-import" if settings.import_goal else "grid-clip"
    parameters = settings.parameters(None if geometric or settings.import_goal else model)
    inputs = {"writer": writer, "data": ds.fingerprint(),
              "parameters": parameters,
              "import_goal": settings.import_goal and Path(settings.import_goal).name}
    check_output(out, "a segment sidecar", inputs, overwrite=settings.overwrite)
    if geometric:
        sidecar = synthdense_segments(ds)
    elif settings.import_goal:
        sidecar = import_goal(settings.import_goal, ds)
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
