"""K-fold selection of retrieval settings: tune on k-1 folds of the questions, report on the fold left out.

Every candidate setting (a search mode or a variant) is run once over all questions; each question's
metrics are kept. For each fold, the candidate with the best mean nDCG@10 on the *other* folds is chosen,
and its figures on the held-out fold are what is reported. The mean and spread over the folds of those
held-out figures estimate how the tuning procedure does on questions it never saw (Varma & Simon 2006,
"Bias in error estimation when using cross-validation for model selection"): choosing the best of many
settings on the questions it is then measured on reads high, and this cannot.

A single fixed setting (no choice involved) is also reported per fold, so its spread is visible too.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

PerQuery = Mapping[str, Mapping[str, float]]
"""question id -> metric name -> value"""

SELECT_BY = "nDCG@10"


def assign_folds(query_ids: Sequence[str], folds: int, seed: int = 0) -> dict[str, int]:
    """Each question to one of ``folds`` folds of (nearly) equal size: a seeded shuffle of the sorted ids,
    dealt round-robin, so the assignment depends on the ids and the seed only."""
    if folds < 2:
        raise ValueError("folds must be at least 2")
    ids = sorted(set(query_ids))
    if len(ids) < folds:
        raise ValueError(f"{len(ids)} questions cannot make {folds} folds")
    random.Random(seed).shuffle(ids)
    return {q: i % folds for i, q in enumerate(ids)}


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def _spread(values: Sequence[float]) -> float:
    return statistics.stdev(values) if len(values) > 1 else 0.0


def mean_metrics(per_query: PerQuery, queries: Sequence[str]) -> dict[str, float]:
    names = sorted({m for q in queries for m in per_query[q]})
    return {m: _mean([per_query[q].get(m, 0.0) for q in queries]) for m in names}


@dataclass
class Summary:
    """Mean and sample standard deviation over the folds of one figure."""

    mean: float
    std: float
    per_fold: list[float]

    @classmethod
    def of(cls, values: Sequence[float]) -> Summary:
        return cls(_mean(values), _spread(values), list(values))

    def as_dict(self) -> dict[str, Any]:
        return {
            "mean": round(self.mean, 4),
            "std": round(self.std, 4),
            "per_fold": [round(v, 4) for v in self.per_fold],
        }


@dataclass
class CrossValidation:
    folds: int
    seed: int
    queries: int
    fixed: dict[str, dict[str, Summary]]
    """candidate -> metric -> its held-out figures over the folds (the candidate fixed, nothing chosen)"""
    train: dict[str, dict[str, float]]
    """candidate -> metric -> mean over all questions (a train figure when the candidate was chosen on them)"""
    chosen: list[str]
    """per fold: the candidate chosen on the other folds"""
    tuned: dict[str, Summary]
    """metric -> the chosen candidates' held-out figures over the folds: the protocol's figure"""
    final_choice: str
    """the candidate best on all questions: what to ship (its expected quality is ``tuned``, not its train mean)"""
    candidates: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "folds": self.folds,
            "seed": self.seed,
            "queries": self.queries,
            "select_by": SELECT_BY,
            "tuned_heldout": {m: s.as_dict() for m, s in self.tuned.items()},
            "chosen_per_fold": self.chosen,
            "final_choice": self.final_choice,
            "candidates": {
                c: {
                    "heldout": {m: s.as_dict() for m, s in self.fixed[c].items()},
                    "train": {m: round(v, 4) for m, v in self.train[c].items()},
                }
                for c in self.candidates
            },
        }


def cross_validate(
    results: Mapping[str, PerQuery],
    folds: int = 5,
    seed: int = 0,
    select_by: str = SELECT_BY,
    tolerance: float = 0.0,
) -> CrossValidation:
    """``results``: candidate -> question -> metrics, every candidate over the same questions.

    The choice on each fold's training questions is the first-listed candidate whose mean is within
    ``tolerance`` of the best one's: with 0, the best (ties to the first listed: list the current default
    first); with a tolerance and the candidates listed cheapest first, the cheapest that costs at most that
    much quality (a speed knob: IVFFlat probes, `bench/ivfflat_probes.py`)."""
    if not results:
        raise ValueError("no candidates to choose from")
    candidates = list(results)
    queries = sorted(results[candidates[0]])
    for c in candidates:
        if sorted(results[c]) != queries:
            raise ValueError(f"candidate {c!r} was not run over the same questions")
    fold_of = assign_folds(queries, folds, seed)
    held = [[q for q in queries if fold_of[q] == f] for f in range(folds)]
    rest = [[q for q in queries if fold_of[q] != f] for f in range(folds)]

    def best(on: Sequence[str]) -> str:
        scores = {c: _mean([results[c][q].get(select_by, 0.0) for q in on]) for c in candidates}
        top = max(scores.values())
        return next(c for c in candidates if scores[c] >= top - tolerance)

    fixed: dict[str, dict[str, Summary]] = {}
    train: dict[str, dict[str, float]] = {}
    for c in candidates:
        per_fold = [mean_metrics(results[c], held[f]) for f in range(folds)]
        fixed[c] = {m: Summary.of([pf[m] for pf in per_fold]) for m in per_fold[0]}
        train[c] = mean_metrics(results[c], queries)
    chosen = [best(rest[f]) for f in range(folds)]
    heldout = [mean_metrics(results[chosen[f]], held[f]) for f in range(folds)]
    tuned = {m: Summary.of([h[m] for h in heldout]) for m in heldout[0]}
    return CrossValidation(folds, seed, len(queries), fixed, train, chosen, tuned, best(queries), candidates)
