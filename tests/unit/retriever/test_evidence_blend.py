"""The evidence/recency blend of the retriever (services/retriever/engine/ranking/blends.py ``evidence_blended``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from services.retriever.engine.config import SearchConfig
from services.retriever.engine.lexical.postings import CorpusCounts
from services.retriever.engine.lexical.stats import CorpusStats
from services.retriever.engine.pipeline import SearchEngine
from services.retriever.engine.ranking.blends import EvidenceBlend, evidence_blended, recency
from services.retriever.engine.ranking.fusion import ReciprocalRankFusion
from services.retriever.engine.scored import Scored
from services.retriever.engine.stages import hydrate as hydrate_stage
from services.retriever.engine.stages import retrieve as retrieve_stage
from shared.models import SearchFilters
from shared.settings import RetrievalSettings

YEAR = 2026


def test_weights_zero_leave_the_ranking_exactly_as_it_is() -> None:
    ranked = [("a", 0.5), ("b", 0.4), ("c", 0.4)]
    meta = {"a": (0.3, 1990), "b": (1.0, 2025), "c": (0.9, 2026)}
    assert evidence_blended(ranked, meta, EvidenceBlend(0.0, 0.0, 10.0, YEAR)) is ranked


def test_stronger_evidence_with_the_same_relevance_moves_up() -> None:
    ranked = [("editorial", 0.60), ("unknown", 0.60), ("meta", 0.60), ("rct", 0.60)]
    meta = {"editorial": (0.3, None), "meta": (1.0, None), "rct": (0.9, None)}
    out = evidence_blended(ranked, meta, EvidenceBlend(0.2, 0.0, 10.0, YEAR))
    assert [c for c, _ in out] == ["meta", "rct", "unknown", "editorial"]
    scores = dict(out)
    assert scores["meta"] == pytest.approx(0.60 * (1 + 0.2 * 0.5))  # +10 %
    assert scores["rct"] == pytest.approx(0.60 * (1 + 0.2 * 0.4))
    assert scores["unknown"] == pytest.approx(0.60)  # unclassified: never moved
    assert scores["editorial"] == pytest.approx(0.60 * (1 - 0.2 * 0.2))  # -4 %


def test_a_small_weight_does_not_overturn_a_clear_relevance_gap() -> None:
    ranked = [("relevant-editorial", 0.80), ("weak-meta", 0.50)]
    out = evidence_blended(ranked, {"relevant-editorial": (0.3, None), "weak-meta": (1.0, None)}, EvidenceBlend(0.2))
    assert [c for c, _ in out] == ["relevant-editorial", "weak-meta"]


@pytest.mark.parametrize("scale", [1 / 61, 1.0, 12.5])
def test_the_blend_means_the_same_at_any_score_scale(scale: float) -> None:
    ranked = [("x", 1.0 * scale), ("y", 0.96 * scale), ("z", 0.90 * scale)]
    meta = {"x": (0.3, None), "y": (1.0, None), "z": (0.9, None)}
    assert [c for c, _ in evidence_blended(ranked, meta, EvidenceBlend(0.2))] == ["y", "z", "x"]


def test_a_negative_score_moves_the_right_way() -> None:
    out = dict(evidence_blended([("a", -0.4), ("b", -0.4)], {"a": (1.0, None), "b": (0.3, None)}, EvidenceBlend(0.5)))
    assert out["a"] > -0.4 > out["b"]


def test_recency_halves_every_half_life() -> None:
    assert recency(YEAR, YEAR, 10.0) == 1.0
    assert recency(YEAR + 3, YEAR, 10.0) == 1.0  # a future year counts as this year
    assert recency(YEAR - 10, YEAR, 10.0) == pytest.approx(0.5)
    assert recency(YEAR - 20, YEAR, 10.0) == pytest.approx(0.25)
    assert recency(YEAR - 5, YEAR, 5.0) == pytest.approx(0.5)
    assert recency(None, YEAR, 10.0) == 0.5  # unknown year: one half-life, neutral


def test_recency_lifts_new_sources_and_lowers_old_ones() -> None:
    ranked = [("old", 0.5), ("undated", 0.5), ("half-life", 0.5), ("new", 0.5)]
    meta = {"old": (None, YEAR - 40), "half-life": (None, YEAR - 10), "new": (None, YEAR)}
    out = evidence_blended(ranked, meta, EvidenceBlend(0.0, 0.2, 10.0, YEAR))
    assert [c for c, _ in out] == ["new", "undated", "half-life", "old"]
    scores = dict(out)
    assert scores["new"] == pytest.approx(0.5 * (1 + 0.2 * 0.5))
    assert scores["half-life"] == pytest.approx(0.5)
    assert scores["old"] == pytest.approx(0.5 * (1 + 0.2 * (0.5**4 - 0.5)))
    shorter = dict(evidence_blended(ranked, meta, EvidenceBlend(0.0, 0.2, 5.0, YEAR)))
    assert shorter["half-life"] < scores["half-life"]  # ten years is two half-lives of five


def test_ties_keep_their_order() -> None:
    ranked = [("x", 0.3), ("y", 0.3), ("z", 0.3)]
    assert [c for c, _ in evidence_blended(ranked, {}, EvidenceBlend(0.3, 0.3))] == ["x", "y", "z"]
    same = {"x": (0.9, 2000), "y": (0.9, 2000), "z": (0.9, 2000)}
    assert [c for c, _ in evidence_blended(ranked, same, EvidenceBlend(0.3, 0.3, 10.0, YEAR))] == ["x", "y", "z"]


def test_the_settings_defaults_bounds_and_the_searcher() -> None:
    defaults = RetrievalSettings()  # type: ignore[call-arg]
    # The measured default (docs/benchmarks.md, issue #19); recency cannot be measured on the harness: off.
    assert (defaults.evidence_weight, defaults.recency_weight, defaults.recency_half_life_years) == (0.05, 0.0, 10.0)
    with pytest.raises(ValueError):
        RetrievalSettings(evidence_weight=1.5)  # type: ignore[call-arg]
    with pytest.raises(ValueError):
        RetrievalSettings(recency_half_life_years=0)  # type: ignore[call-arg]
    settings = RetrievalSettings(evidence_weight=0.2, recency_weight=0.1, recency_half_life_years=7)  # type: ignore[call-arg]
    searcher = SearchEngine.from_settings(None, None, settings)  # type: ignore[arg-type]
    assert searcher.config.evidence == EvidenceBlend(0.2, 0.1, 7.0)
    assert SearchEngine(None, None, SearchConfig(fusion=ReciprocalRankFusion())).config.evidence.active is False  # type: ignore[arg-type]


# --- through SearchEngine.search (store replaced: fixed legs, rows and reranker) ----------------------------

EVIDENCE = {"a": 0.3, "b": None, "c": 1.0, "d": 0.9}
DENSE = {"a": 0.80, "b": 0.79, "c": 0.78, "d": 0.50}


class FixedStats(CorpusStats):
    """Corpus counts without a store (the lexical leg below does not read them)."""

    async def get(self, pool: Any) -> CorpusCounts:
        return CorpusCounts(len(DENSE), 1.0, 1.0, 1.0)


class FixedSearcher(SearchEngine):
    """The legs below over no store."""

    def __init__(self, **kw: Any):
        super().__init__(pool=None, index=None, config=SearchConfig(**kw), stats=FixedStats())  # type: ignore[arg-type]


async def _dense_leg(_pool: Any, _index: Any, _query_vector: np.ndarray, k: int, *_: Any, **__: Any) -> list[Scored]:
    return [Scored(c, s) for c, s in DENSE.items()][:k]


async def _lexical_leg(_pool: Any, _query: str, k: int, *_: Any, **__: Any) -> list[Scored]:
    return [Scored(c, 1.0) for c in DENSE][:k]


class FixedReranker:
    name = "fixed"

    async def rerank(self, query: str, passages: Sequence[str]) -> list[float]:
        return [{"a": 2.0, "b": 1.9, "c": 1.85, "d": 1.0}[p] for p in passages]


@pytest.fixture
def _rows(monkeypatch: pytest.MonkeyPatch) -> None:
    async def hydrate(_pool: Any, ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        base = {"section": None, "source": "pubmed", "pmid": None, "pmcid": None, "doi": None, "journal": None}
        return {
            c: {
                **base,
                "chunk_id": c,
                "document_id": f"doc-{c}",
                "content": c,
                "embedding_text": c,
                "source_id": c,
                "title": c,
                "year": None,
                "study_type": None,
                "evidence_level": EVIDENCE[c],
                "priority": 50,
                "icite_pmid": None,  # no iCite metrics imported
            }
            for c in ids
        }

    # Patched where the stages look them up.
    monkeypatch.setattr(hydrate_stage, "hit_rows", hydrate)
    monkeypatch.setattr(retrieve_stage, "dense_search", _dense_leg)
    monkeypatch.setattr(retrieve_stage, "bm25_rank", _lexical_leg)


async def _order(searcher: SearchEngine, mode: str, top_n: int = 4) -> list[str]:
    result = await searcher.search(
        "q", np.ones(3), mode=mode, top_k=4, top_n=top_n, filters=SearchFilters(), reranker=FixedReranker()
    )
    return [h.chunk_id for h in result.hits]


@pytest.mark.usefixtures("_rows")
async def test_the_searcher_blends_before_the_cut_to_top_n() -> None:
    assert await _order(FixedSearcher(), "dense") == ["a", "b", "c", "d"]
    blended = FixedSearcher(evidence=EvidenceBlend(0.2))
    # c (meta-analysis, 0.78 -> 0.858) passes a (editorial, 0.80 -> 0.768) and b (unclassified, 0.79).
    assert await _order(blended, "dense") == ["c", "b", "a", "d"]
    assert await _order(blended, "dense", top_n=1) == ["c"]  # blended first, then cut
    assert await _order(FixedSearcher(evidence=EvidenceBlend(0.0, 0.0)), "dense") == ["a", "b", "c", "d"]


@pytest.mark.usefixtures("_rows")
async def test_the_reranker_scores_are_blended_too() -> None:
    assert await _order(FixedSearcher(), "hybrid+rerank") == ["a", "b", "c", "d"]
    # rerank c 1.85 -> 2.035, a 2.0 -> 1.92, b 1.9 -> 1.9, d 1.0 -> 1.08
    assert await _order(FixedSearcher(evidence=EvidenceBlend(0.2)), "hybrid+rerank") == ["c", "a", "b", "d"]


def test_the_harness_can_classify_documents_by_title() -> None:
    from evaluation.retrieval import Dataset, to_documents

    ds = Dataset(
        "t",
        {
            "1": ("Statins after stroke: a meta-analysis of randomised trials", "text"),
            "2": ("A randomized controlled trial of aspirin", "text"),
            "3": ("Aspirin and the platelet", "text"),
        },
        {},
        {},
    )
    plain = to_documents(ds)
    assert [(d.study_type, d.evidence_level) for d in plain] == [(None, None)] * 3  # BEIR carries none
    typed = {d.source_id: (d.study_type, d.evidence_level) for d in to_documents(ds, study_types_from_titles=True)}
    assert typed == {"1": ("meta-analysis", 1.0), "2": ("randomized-controlled-trial", 0.9), "3": ("other", 0.5)}
