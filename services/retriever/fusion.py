"""Reciprocal rank fusion (Cormack et al. 2009): score(d) = sum_i w_i / (k + rank_i(d))."""

from __future__ import annotations

from collections.abc import Sequence


class ReciprocalRankFusion:
    def __init__(self, k: int = 60, weights: Sequence[float] | None = None):
        if k < 0:
            raise ValueError("k must be >= 0")
        self.k = k
        self.weights = list(weights) if weights is not None else None

    def fuse(self, rankings: Sequence[Sequence[str]]) -> list[tuple[str, float]]:
        """Fuse ranked id lists (best first) into one list of (id, fused score), best first.

        Ties are broken by the order in which ids were first seen, so the result is deterministic.
        """
        weights = self.weights or [1.0] * len(rankings)
        if len(weights) != len(rankings):
            raise ValueError(f"{len(rankings)} rankings but {len(weights)} weights")
        scores: dict[str, float] = {}
        for ranking, weight in zip(rankings, weights, strict=True):
            for rank, item in enumerate(ranking, start=1):
                scores[item] = scores.get(item, 0.0) + weight / (self.k + rank)
        order = {item: i for i, item in enumerate(scores)}
        return sorted(scores.items(), key=lambda kv: (-kv[1], order[kv[0]]))
