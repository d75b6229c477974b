"""Side inputs some training objectives need beside (image, caption): segment sidecars and edge maps.

What a trainer uses, per dataset (checked before any model loads; bad or missing input is one line
naming what is missing and how to make it):

- ``segments.require_segments(dataset, path=None)`` → :class:`~hnbench.sidecars.segments.SegmentSidecar`;
  ``sidecar.per_image(dataset)[i]`` is image ``i``'s :class:`~hnbench.sidecars.segments.ImageSegments`
  (or None): its size, the caption its spans index, and its segments best first, each a
  :class:`~hnbench.sidecars.segments.Segment` (``box`` (x1, y1, x2, y2) in image pixels, ``sentence``,
  ``char_span`` [start, end) in the caption, ``similarity``, synthdense's ``object``).
  ``token_span(caption, segment.char_span, encode, context_length=...)`` gives the sentence's token
  positions for a tokenizer (per-word tokenisation; open_clip's SimpleTokenizer has no offsets), and
  ``sidecar.spans(dataset, encode, context_length=...)`` all of it at once: per image position, its
  segments as (box, char span, token span or None where truncated away).
- ``edges.require_edges(dataset, options.EdgeSettings(...))`` → :class:`~hnbench.sidecars.edges.EdgeImages`, an image
  source with the dataset's ids: ``open(i)`` the RGB edge map (for the towers' transform), ``tensor(i)`` a
  (1, H, W) float map, ``edge_map(i)`` the greyscale PIL image; ``settings.recorded()`` goes in the run.
  ``segments.crop_box(image_or_edge_map, segment.box, margin)`` cuts a segment's crop (edge crops: the same
  boxes on the edge map).

Modules: :mod:`~hnbench.sidecars.options` (the settings, light), :mod:`~hnbench.sidecars.segments` (schema,
reader, writers, spans), :mod:`~hnbench.sidecars.grid` (``hnbench segments``), :mod:`~hnbench.sidecars.edges`.
"""

from __future__ import annotations

__all__ = ["OUTLINES", "SEGMENT_GEOMETRY"]

# What a data set declares it can make side inputs from (``ImageTextDataset.side_inputs``: synthdense's loader
# declares both), asked here instead of its name:
#: each object's exact box and sentence (render geometry): its segment sidecar is written from it on first use,
#: beside its split, and ``hnbench segments`` needs no model for it
SEGMENT_GEOMETRY = "segment_geometry"
#: each object's exact outline: edge maps drawn, not detected (``--edges outline``, what ``auto`` picks for it)
OUTLINES = "outlines"
