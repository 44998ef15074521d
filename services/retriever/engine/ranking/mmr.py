"""Maximal marginal relevance (Carbonell & Goldstein 1998): relevant passages that do not repeat each other.

Step by step, pick the candidate maximising ``lambda * rel(d) - (1 - lambda) * max_{s in picked} sim(d, s)``,
with ``rel`` the candidates' scores min-max scaled to [0, 1] and ``sim`` the cosine of their (normalised)
vectors.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def mmr_select(scores: Sequence[float], vectors: np.ndarray, n: int, lam: float) -> list[int]:
    """Indices of ``n`` candidates in MMR order (the first is always the most relevant)."""
    if not 0 <= lam <= 1:
        raise ValueError("lambda must be in [0, 1]")
    count = len(scores)
    if count == 0 or n <= 0:
        return []
    rel = np.asarray(scores, dtype=np.float64)
    span = rel.max() - rel.min()
    rel = (rel - rel.min()) / span if span > 0 else np.ones_like(rel)
    v = np.asarray(vectors, dtype=np.float64)
    norms = np.linalg.norm(v, axis=1, keepdims=True)
    v = v / np.where(norms == 0, 1, norms)
    sim = v @ v.T
    picked: list[int] = []
    max_sim = np.full(count, -np.inf)
    remaining = np.ones(count, dtype=bool)
    for _ in range(min(n, count)):
        redundancy = np.where(np.isfinite(max_sim), max_sim, 0.0)
        value = lam * rel - (1 - lam) * redundancy
        value[~remaining] = -np.inf
        best = int(np.argmax(value))
        picked.append(best)
        remaining[best] = False
        max_sim = np.maximum(max_sim, sim[best])
    return picked
