"""Dense pseudo-relevance feedback: the query vector moves towards the first ranking's best chunks."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from services.retriever.engine.config import SearchConfig
from services.retriever.engine.pipeline import SearchEngine
from services.retriever.engine.scored import Scored
from services.retriever.engine.stages import feedback as feedback_stage
from services.retriever.engine.stages import hydrate as hydrate_stage
from services.retriever.engine.stages import retrieve as retrieve_stage
from shared.models import SearchFilters

VECTORS = {
    "a": np.array([1.0, 0.0, 0.0], dtype=np.float32),
    "b": np.array([0.6, 0.8, 0.0], dtype=np.float32),
    "c": np.array([0.0, 1.0, 0.0], dtype=np.float32),
    "d": np.array([0.0, 0.0, 1.0], dtype=np.float32),
}


class SeenIndex:
    """The vector index's stand-in: the dense leg below records every query vector it is searched with."""

    def __init__(self) -> None:
        self.seen: list[np.ndarray] = []


class FakeSearcher(SearchEngine):
    """Exact cosine over four chunks (the dense leg below); records every query vector the dense leg saw."""

    def __init__(self, **kw: Any):
        self.seen_index = SeenIndex()
        super().__init__(pool=None, index=self.seen_index, config=SearchConfig(**kw))  # type: ignore[arg-type]
        self.seen = self.seen_index.seen


async def _dense_leg(
    _pool: Any, index: SeenIndex, query_vector: np.ndarray, k: int, *_: Any, **__: Any
) -> list[Scored]:
    index.seen.append(query_vector)
    scores = {c: float(v @ query_vector) for c, v in VECTORS.items()}
    return [Scored(c, s) for c, s in sorted(scores.items(), key=lambda kv: -kv[1])][:k]


@pytest.fixture(autouse=True)
def _no_store(monkeypatch: pytest.MonkeyPatch) -> None:
    async def hydrate(_pool: Any, ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        return {
            c: {
                "chunk_id": c,
                "document_id": f"doc-{c}",
                "section": None,
                "content": c,
                "embedding_text": c,
                "source": "pubmed",
                "source_id": c,
                "pmid": None,
                "pmcid": None,
                "doi": None,
                "title": c,
                "journal": None,
                "year": None,
                "study_type": None,
                "evidence_level": None,
                "priority": 50,
                "icite_pmid": None,  # no iCite metrics imported
            }
            for c in ids
        }

    async def vectors_of(_pool: Any, _index: Any, ids: Sequence[str]) -> dict[str, np.ndarray]:
        return {c: VECTORS[c] for c in ids if c in VECTORS}

    # Patched where the stages look them up.
    monkeypatch.setattr(hydrate_stage, "hit_rows", hydrate)
    monkeypatch.setattr(feedback_stage, "vectors_of", vectors_of)
    monkeypatch.setattr(retrieve_stage, "dense_search", _dense_leg)


async def _ranked(searcher: FakeSearcher, q: np.ndarray) -> list[str]:
    result = await searcher.search("q", q, mode="dense", top_k=4, top_n=4, filters=SearchFilters())
    return [h.chunk_id for h in result.hits]


async def test_without_feedback_the_dense_leg_runs_once() -> None:
    s = FakeSearcher()
    q = np.array([0.9, 0.1, 0.42], dtype=np.float32)
    q /= np.linalg.norm(q)
    assert await _ranked(s, q) == ["a", "b", "d", "c"]
    assert len(s.seen) == 1


async def test_feedback_moves_the_query_towards_the_top_chunks_and_searches_again() -> None:
    s = FakeSearcher(prf_docs=2, prf_weight=1.0)
    q = np.array([0.9, 0.1, 0.42], dtype=np.float32)
    q /= np.linalg.norm(q)
    ranked = await _ranked(s, q)
    assert len(s.seen) == 2
    moved = s.seen[1]
    assert np.linalg.norm(moved) == pytest.approx(1.0, abs=1e-5)
    expected = q + 1.0 * (VECTORS["a"] + VECTORS["b"]) / 2
    assert moved == pytest.approx(expected / np.linalg.norm(expected), abs=1e-5)
    assert ranked[:2] == ["a", "b"]


async def test_feedback_can_promote_a_neighbour_of_the_best_chunk() -> None:
    s = FakeSearcher(prf_docs=1, prf_weight=2.0)
    q = np.array([0.55, 0.0, 0.5], dtype=np.float32)  # a and d nearly tied; b is a's neighbour
    q /= np.linalg.norm(q)
    before = await _ranked(FakeSearcher(), q)
    after = await _ranked(s, q)
    assert before[:2] == ["a", "d"] and before.index("b") > 1
    assert after[:2] == ["a", "b"]  # the query moved towards a, so b (close to a) passed d
