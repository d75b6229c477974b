"""Known structure in a set: items carry labels (synthdense's scene *families*, a user's own clusters),
and we ask whether near-duplicates follow them.

For labels ``l_i`` (and groups ``g_i`` as in :mod:`hnbench.hardness.stats`):

- ``within``: similarities of unordered pairs with ``l_i == l_j``, ``g_i != g_j`` (exact, enumerated);
- ``between``: pairs with ``l_i != l_j``: exact when the pairwise pass was exact (all pairs minus
  within, so its quantiles come from the histogram), otherwise from the sampled pairs;
- ``nearest_same_label``: share of items whose hardest negative carries their own label;
  ``nearest_same_label_chance``: the share expected if that neighbour were a uniformly random negative,
  mean over items of ``#{j : l_j = l_i, g_j != g_i} / #{j : g_j != g_i}``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import torch

from hnbench.hardness.stats import Distribution, Embeddings, PairSample, PairSums, _as_unit

MAX_WITHIN_PAIRS = 50_000_000  # labels are meant to be small groups; beyond this they are not "near-duplicates"


@dataclass
class Structure:
    """How similarities split along a labelling of the items."""

    field: str
    n_labels: int
    mean_label_size: float
    within: Distribution
    between: Distribution
    nearest_same_label: float
    nearest_same_label_chance: float
    n_items: int


def within_label_pairs(labels: np.ndarray, groups: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """All unordered pairs ``(i < j)`` with equal labels and different groups (vectorised per label size)."""
    lab = np.asarray(labels)
    order = np.argsort(lab, kind="stable")
    _, start, count = np.unique(lab[order], return_index=True, return_counts=True)
    total = int((count.astype(np.int64) * (count - 1) // 2).sum())
    if total > MAX_WITHIN_PAIRS:
        raise ValueError(f"labels form {total} within-label pairs (> {MAX_WITHIN_PAIRS}); use finer labels")
    ii, jj = [], []
    for size in np.unique(count):
        if size < 2:
            continue
        starts = start[count == size]
        members = order[starts[:, None] + np.arange(size)[None, :]]  # (n_labels_of_this_size, size)
        p, q = np.triu_indices(size, 1)
        ii.append(members[:, p].reshape(-1))
        jj.append(members[:, q].reshape(-1))
    if not ii:
        e = np.zeros(0, np.int64)
        return e, e
    i, j = np.concatenate(ii), np.concatenate(jj)
    keep = groups[i] != groups[j]
    return np.minimum(i, j)[keep], np.maximum(i, j)[keep]


def label_structure(x: Embeddings, labels: npt.ArrayLike, groups: npt.ArrayLike | None = None, *,
                    nearest_index: np.ndarray, pairs: PairSums | None = None, sample: PairSample | None = None,
                    field: str = "label", device: str = "cpu") -> Structure:
    """Within- vs between-label similarity and the hardest negative's label (see the module docstring)."""
    t = _as_unit(x, torch.device(device))
    n = t.shape[0]
    lab = np.unique(np.asarray(labels).astype(str), return_inverse=True)[1].reshape(-1)
    g = np.arange(n) if groups is None else np.asarray(groups)
    i, j = within_label_pairs(lab, g)
    vals = np.empty(i.size, np.float32)
    with torch.inference_mode():
        for s in range(0, i.size, 8192):
            a, b = torch.from_numpy(i[s:s + 8192]).to(t.device), torch.from_numpy(j[s:s + 8192]).to(t.device)
            vals[s:s + 8192] = (t[a] * t[b]).sum(1).cpu().numpy()
    within = Distribution.from_values(vals)
    if pairs is not None:
        w = PairSums()
        w.add(torch.from_numpy(vals))
        between = Distribution.from_sums(pairs.minus(w))
    elif sample is not None:
        diff = lab[sample.i] != lab[sample.j]
        between = Distribution.from_values(sample.values[diff], method="sampled")
    else:
        raise ValueError("label_structure needs the exact pair sums or a pair sample for 'between'")
    has = nearest_index >= 0
    same = float((lab[nearest_index[has]] == lab[has]).mean()) if has.any() else float("nan")
    # chance: same-label other-group items over all other-group items, per item
    lab_size = np.bincount(lab)
    _, ginv, gcount = np.unique(g, return_inverse=True, return_counts=True)
    ginv = ginv.reshape(-1)
    _, kinv, kcount = np.unique(lab.astype(np.int64) * gcount.size + ginv, return_inverse=True, return_counts=True)
    same_label_other_group = lab_size[lab] - kcount[kinv.reshape(-1)]
    negatives = n - gcount[ginv]
    ok = negatives > 0
    chance = float((same_label_other_group[ok] / negatives[ok]).mean()) if ok.any() else float("nan")
    return Structure(field=field, n_labels=int(lab_size.size), mean_label_size=float(lab_size.mean()),
                     within=within, between=between, nearest_same_label=same,
                     nearest_same_label_chance=chance, n_items=n)
