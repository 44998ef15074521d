"""Dense pseudo-relevance feedback (Rocchio on the vector, ANCE-PRF style, no training): the query vector moves
towards the mean vector of the first ranking's best chunks."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np


def moved_query(
    query_vector: np.ndarray, top: Sequence[str], vectors: Mapping[str, np.ndarray], weight: float
) -> np.ndarray | None:
    """``query_vector + weight * mean(vectors of top)``, unit length; None when none of ``top`` has a vector."""
    if not vectors:
        return None
    moved = query_vector + weight * np.mean([vectors[c] for c in top if c in vectors], axis=0)
    normed: np.ndarray = moved / max(float(np.linalg.norm(moved)), 1e-12)
    return normed
