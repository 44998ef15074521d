"""Claim support, offline: does the passage a sentence cites say what the sentence says?

A citation can be verified (the id was among the sources) and still be wrong: the sentence may rest on another
source, or on none. Each cited sentence is scored against the passages it cites, and one below the threshold is
reported as unsupported. The offline score is a calibrated probability from two signals:

- ``similarity``: the largest cosine similarity between the sentence and any sentence of the passage (and the
  passage as a whole), with the check's own embedding model (``EVIDENTIA_SUPPORT_SIMILARITY_MODEL``, by default
  all-MiniLM-L6-v2, the most accurate calibrated one; it need not be the index's model);
- ``overlap``: the share of the sentence's content words (crudely stemmed) that occur in the passage.

They are combined by a logistic model fitted on the calibration half of the labelled set in
``tests/fixtures/claim_support/`` (``python -m bench.claim_support --calibrate`` prints the coefficients, which
live below in :data:`SIMILARITY_MODELS`, one per embedding model, and :data:`LEXICAL_MODEL`); the figures on the
other half are in docs/benchmarks.md. Without an embedding model, or with one not calibrated, the lexical model
alone is used (``method="lexical"``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from shared.embedding.base import Embedder
from shared.text import SENTENCE_BREAK, content_words, prefix_stem, split_sentences


@dataclass(frozen=True)
class SupportModel:
    """``P(supported) = sigmoid(bias + w_similarity * similarity + w_overlap * overlap)``; supported at >= threshold."""

    bias: float
    w_similarity: float
    w_overlap: float
    threshold: float

    def probability(self, similarity: float, overlap: float) -> float:
        z = self.bias + self.w_similarity * similarity + self.w_overlap * overlap
        return 1.0 / (1.0 + math.exp(-z))


# Fitted by `python -m bench.claim_support --calibrate` on the calibration half of the labelled set. Cosine
# similarities differ from one embedding model to another, so each model has its own; a model without one is
# not loaded for this check, which then uses the lexical model.
SIMILARITY_MODELS: dict[str, SupportModel] = {
    "sentence-transformers/all-MiniLM-L6-v2": SupportModel(
        bias=-10.7323, w_similarity=11.9298, w_overlap=10.7946, threshold=0.47
    ),
    "BAAI/bge-small-en-v1.5": SupportModel(bias=-15.7548, w_similarity=15.0018, w_overlap=12.562, threshold=0.42),
}
LEXICAL_MODEL = SupportModel(bias=-5.6209, w_similarity=0.0, w_overlap=17.3046, threshold=0.45)


def calibration_for(model_name: str) -> SupportModel | None:
    """The similarity model calibrated for an embedding model (by its canonical name), if there is one."""
    return SIMILARITY_MODELS.get(model_name)


SupportMethod = Literal["similarity", "lexical"]


def content_stems(text: str) -> set[str]:
    """Content words of a text, lower-cased, stop words out, cut to six letters (a crude, language-free stem)."""
    return {prefix_stem(w) for w in content_words(text)}


def overlap(claim: str, passage: str) -> float:
    """Share of the claim's content words found in the passage (0-1)."""
    words = content_stems(claim)
    if not words:
        return 0.0
    return len(words & content_stems(passage)) / len(words)


def passage_sentences(passage: str, limit: int = 40) -> list[str]:
    return split_sentences(passage)[:limit]


def sentence_offsets(passage: str, limit: int = 40) -> list[tuple[int, int]]:
    """Where each sentence of ``passage`` is (the sentences of :func:`passage_sentences`): ``(start, end)``."""
    out: list[tuple[int, int]] = []
    lo = 0
    for b in [*SENTENCE_BREAK.finditer(passage), None]:
        hi = len(passage) if b is None else b.start()
        raw = passage[lo:hi]
        if raw.strip():
            start = lo + len(raw) - len(raw.lstrip())
            out.append((start, start + len(raw.strip())))
        if b is not None:
            lo = b.end()
    return out[:limit]


@dataclass(frozen=True)
class SentenceMatch:
    """The sentence of a claim's passages that matches it best: ``passages[passage][start:end]``."""

    passage: int
    start: int
    end: int
    score: float


@dataclass(frozen=True)
class SupportScore:
    score: float
    similarity: float | None
    overlap: float
    supported: bool


class SupportScorer:
    """Scores (sentence, cited passages) pairs; a sentence's score is its best against any passage it cites."""

    def __init__(
        self, embedder: Embedder | None = None, threshold: float | None = None, model: SupportModel | None = None
    ):
        calibrated = model or (calibration_for(embedder.name) if embedder is not None else None)
        self.embedder = embedder if calibrated is not None else None
        self.model = calibrated or LEXICAL_MODEL
        self.threshold = self.model.threshold if threshold is None else threshold

    @property
    def method(self) -> SupportMethod:
        return "similarity" if self.embedder is not None else "lexical"

    def features(self, claims: Sequence[str], passages: Sequence[Sequence[str]]) -> list[tuple[float | None, float]]:
        """(similarity, overlap) of each claim against its passages (best of each over the passages)."""
        overlaps = [max((overlap(c, p) for p in ps), default=0.0) for c, ps in zip(claims, passages, strict=True)]
        if self.embedder is None:
            return [(None, o) for o in overlaps]
        units: dict[str, int] = {}
        for ps in passages:
            for p in ps:
                for s in [p, *passage_sentences(p)]:
                    units.setdefault(s, len(units))
        if not units or not claims:
            return [(0.0, o) for o in overlaps]
        vectors = self.embedder.encode_passages(list(units))
        claim_vectors = self.embedder.encode_passages(list(claims))
        out: list[tuple[float | None, float]] = []
        for i, ps in enumerate(passages):
            idx = [units[s] for p in ps for s in [p, *passage_sentences(p)]]
            sim = float(np.max(vectors[idx] @ claim_vectors[i])) if idx else 0.0
            out.append((sim, overlaps[i]))
        return out

    def best_sentences(self, claims: Sequence[str], passages: Sequence[Sequence[str]]) -> list[SentenceMatch | None]:
        """For each claim, the sentence of its passages it rests on most likely: the calibrated probability of the
        claim against each sentence alone, highest first (None: the passages have no sentence sharing a word)."""
        units = [[(i, lo, hi, p[lo:hi]) for i, p in enumerate(ps) for lo, hi in sentence_offsets(p)] for ps in passages]
        sims: list[list[float]] = [[0.0] * len(u) for u in units]
        if self.embedder is not None and any(units):
            texts = list(dict.fromkeys(t for u in units for _, _, _, t in u))
            index = {t: k for k, t in enumerate(texts)}
            vectors = self.embedder.encode_passages(texts)
            claim_vectors = self.embedder.encode_passages(list(claims))
            sims = [[float(vectors[index[t]] @ claim_vectors[n]) for _, _, _, t in u] for n, u in enumerate(units)]
        out: list[SentenceMatch | None] = []
        for claim, u, sim in zip(claims, units, sims, strict=True):
            best: SentenceMatch | None = None
            for (i, lo, hi, text), s in zip(u, sim, strict=True):
                ov = overlap(claim, text)
                if ov <= 0 and s <= 0:
                    continue
                p = round(self.model.probability(s, ov), 4)
                if best is None or p > best.score:
                    best = SentenceMatch(i, lo, hi, p)
            out.append(best)
        return out

    def score(self, claims: Sequence[str], passages: Sequence[Sequence[str]]) -> list[SupportScore]:
        out = []
        for sim, ov in self.features(claims, passages):
            p = self.model.probability(sim or 0.0, ov)
            out.append(SupportScore(round(p, 4), sim, ov, p >= self.threshold))
        return out
