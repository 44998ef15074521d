"""How the engine ranks, grouped: the fusion, BM25, feedback, blends, MMR and ANN search depth of a
:class:`~services.retriever.engine.pipeline.SearchEngine`, read from the retrieval settings once."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from services.retriever.engine.lexical.rank import Bm25Params
from services.retriever.engine.ranking.blends import EvidenceBlend
from services.retriever.engine.ranking.fusion import ConvexFusion, ReciprocalRankFusion
from shared.settings import DEFAULT_IVFFLAT_PROBES

if TYPE_CHECKING:
    from shared.settings import RetrievalSettings


@dataclass(frozen=True)
class SearchConfig:
    """The ranking parameters of a search engine (defaults: the engine's own, not the shipped settings)."""

    fusion: ReciprocalRankFusion = field(default_factory=ReciprocalRankFusion)
    convex: ConvexFusion | None = None
    """When set, hybrid modes fuse normalised scores with it instead of reciprocal ranks."""
    fusion_depth: int = 100
    """Results each leg contributes to the fusion (at least ``top_k``)."""
    bm25: Bm25Params = field(default_factory=Bm25Params)
    ef_search: int = 100
    """HNSW ``ef_search`` of a search that names none."""
    ivfflat_probes: int = DEFAULT_IVFFLAT_PROBES
    """IVFFlat lists a dense search reads when the vector table's index is IVFFlat (HNSW: ``ef_search``)."""
    prf_docs: int = 0
    """Dense pseudo-relevance feedback: the first ranking's top ``prf_docs`` chunks move the query vector."""
    prf_weight: float = 0.5
    priority_boost: float = 0.0
    """Blend of document priority into the fused score (:func:`~.ranking.blends.priority_boosted`; 0: off)."""
    evidence: EvidenceBlend = field(default_factory=EvidenceBlend)
    """Blend of evidence weight and recency into the ranking score (default off)."""
    mmr_lambda: float = 0.7

    @classmethod
    def from_settings(
        cls, settings: RetrievalSettings, *, ef_search: int = 100, ivfflat_probes: int = DEFAULT_IVFFLAT_PROBES
    ) -> SearchConfig:
        """The configuration the retrieval settings describe."""
        weights = [settings.dense_weight, settings.lexical_weight]
        return cls(
            fusion=ReciprocalRankFusion(settings.rrf_k, weights),
            convex=ConvexFusion(weights) if settings.fusion == "convex" else None,
            fusion_depth=settings.fusion_depth,
            bm25=Bm25Params.from_settings(settings),
            ef_search=ef_search,
            ivfflat_probes=ivfflat_probes,
            prf_docs=settings.prf_docs,
            prf_weight=settings.prf_weight,
            priority_boost=settings.priority_boost,
            evidence=EvidenceBlend(settings.evidence_weight, settings.recency_weight, settings.recency_half_life_years),
            mmr_lambda=settings.mmr_lambda,
        )
