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


class ConvexFusion:
    """Convex combination of min-max normalised scores (Bruch et al. 2023, "An Analysis of Fusion
    Functions for Hybrid Retrieval"): ``score(d) = sum_i w_i * (s_i(d) - min_i) / (max_i - min_i)``.

    A document missing from a list gets 0 from it (that list's minimum); weights need not sum to 1.
    """

    def __init__(self, weights: Sequence[float] | None = None):
        self.weights = list(weights) if weights is not None else None

    def fuse(self, rankings: Sequence[Sequence[tuple[str, float]]]) -> list[tuple[str, float]]:
        """``(item, fused score)`` of every item of the rankings, best first (ties: first seen); an item missing
        from a ranking gets 0 from it. Raises ValueError when weights and rankings differ in number."""
        weights = self.weights or [1.0] * len(rankings)
        if len(weights) != len(rankings):
            raise ValueError(f"{len(rankings)} rankings but {len(weights)} weights")
        scores: dict[str, float] = {}
        for ranking, weight in zip(rankings, weights, strict=True):
            for item, _ in ranking:
                scores.setdefault(item, 0.0)
            if not ranking:
                continue
            values = [s for _, s in ranking]
            low, high = min(values), max(values)
            span = high - low
            for item, s in ranking:
                scores[item] += weight * ((s - low) / span if span > 0 else 1.0)
        order = {item: i for i, item in enumerate(scores)}
        return sorted(scores.items(), key=lambda kv: (-kv[1], order[kv[0]]))
