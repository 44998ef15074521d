"""Re-scorings of a fused ranking: the document-priority boost, the evidence/recency blend, and the per-paper cap."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from shared.models import NEUTRAL_EVIDENCE_WEIGHT, PRIORITY_NORMAL


def limit_per_document(
    ids: list[tuple[str, float]], doc_of: dict[str, str], per_doc: int | None
) -> list[tuple[str, float]]:
    """``ids`` in order, keeping at most ``per_doc`` chunks of one document (None: all); ``doc_of`` maps
    chunk id to document id (a chunk missing from it counts as its own document)."""
    if per_doc is None:
        return ids
    seen: dict[str, int] = {}
    out = []
    for cid, score in ids:
        doc = doc_of.get(cid, cid)
        if seen.get(doc, 0) < per_doc:
            seen[doc] = seen.get(doc, 0) + 1
            out.append((cid, score))
    return out


def priority_boosted(
    ranked: list[tuple[str, float]], priority_of: dict[str, int], boost: float
) -> list[tuple[str, float]]:
    """``ranked`` re-scored by document priority and sorted again (ties keep their order):
    ``score + boost * |score| * (priority - 50) / 50``, so with ``boost`` 0.1 a high-priority (100) document's
    score grows by 10 %, a low one's (10) shrinks by 8 %, a normal one's (50) is unchanged. A chunk whose
    priority is unknown counts as normal. ``boost`` 0 leaves ``ranked`` as it is."""
    if not boost:
        return ranked
    rescored = [
        (cid, score + boost * abs(score) * (priority_of.get(cid, PRIORITY_NORMAL) - PRIORITY_NORMAL) / PRIORITY_NORMAL)
        for cid, score in ranked
    ]
    return sorted(rescored, key=lambda cs: -cs[1])


def recency(year: int | None, this_year: int, half_life_years: float) -> float:
    """A source's recency, 1 this year (or later) halving every ``half_life_years``:
    ``0.5 ** (max(0, this_year - year) / half_life_years)``; unknown year: 0.5 (one half-life, neutral)."""
    if year is None:
        return 0.5
    return float(0.5 ** (max(0, this_year - year) / half_life_years))


@dataclass(frozen=True)
class EvidenceBlend:
    """How evidence weight and recency move a ranking score (``EVIDENTIA_RETRIEVAL_EVIDENCE_WEIGHT``,
    ``_RECENCY_WEIGHT``, ``_RECENCY_HALF_LIFE_YEARS``):

    ``score + |score| * (evidence_weight * (e - 0.5) + recency_weight * (r - 0.5))``

    with ``e`` the source's evidence weight (0-1; unknown: 0.5) and ``r`` its :func:`recency`. The change is
    relative to the score itself, so it means the same whatever the scale of the mode's scores (RRF ~0.016,
    cosine ~0.5, BM25 ~10; a negative reranker logit moves the right way too); an unclassified source of
    unknown year is never moved; with both weights 0 the ranking is left exactly as it is."""

    evidence_weight: float = 0.0
    recency_weight: float = 0.0
    half_life_years: float = 10.0
    this_year: int | None = None
    """The year ages are counted from (None: the current UTC year)."""

    @property
    def active(self) -> bool:
        return bool(self.evidence_weight or self.recency_weight)

    def factor(self, evidence: float | None, year: int | None, this_year: int) -> float:
        """The relative change of a score: ``evidence_weight * (e - 0.5) + recency_weight * (r - 0.5)``."""
        e = NEUTRAL_EVIDENCE_WEIGHT if evidence is None else evidence
        r = recency(year, this_year, self.half_life_years)
        return self.evidence_weight * (e - NEUTRAL_EVIDENCE_WEIGHT) + self.recency_weight * (r - 0.5)


def evidence_blended(
    ranked: list[tuple[str, float]], meta_of: Mapping[str, tuple[float | None, int | None]], blend: EvidenceBlend
) -> list[tuple[str, float]]:
    """``ranked`` re-scored by :class:`EvidenceBlend` and sorted again, best first (ties keep their order, so
    the result is deterministic); ``meta_of`` maps a chunk id to its document's (evidence weight, year), a chunk
    missing from it counts as unclassified and undated (unchanged). An inactive blend returns ``ranked`` itself."""
    if not blend.active:
        return ranked
    this_year = blend.this_year if blend.this_year is not None else datetime.now(UTC).year
    rescored = []
    for cid, score in ranked:
        evidence, year = meta_of.get(cid, (None, None))
        rescored.append((cid, score + abs(score) * blend.factor(evidence, year, this_year)))
    return sorted(rescored, key=lambda cs: -cs[1])
