"""The engine's lexical leg runs as the BM25 settings say: with ``EVIDENTIA_RETRIEVAL_BM25_PRUNING`` on, the
searcher's lexical ranking is the pruned one (until this test, the stage dropped the setting and every search
scored every posting whatever it said). Unset, it prunes (the exhaustive pass is the oracle, chosen by the
setting)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from services.retriever.engine.lexical.postings import CorpusCounts
from services.retriever.engine.lexical.stats import CorpusStats
from services.retriever.engine.pipeline import SearchEngine
from services.retriever.engine.scored import Scored
from services.retriever.engine.stages import hydrate as hydrate_stage
from services.retriever.engine.stages import retrieve as retrieve_stage
from shared.models import SearchFilters
from shared.settings import RetrievalSettings


class _Stats(CorpusStats):
    """Corpus counts without a store."""

    async def get(self, pool: Any) -> CorpusCounts:
        return CorpusCounts(2, 1.0, 1.0, 1.0)


@pytest.mark.parametrize(("pruning", "prunes"), [(False, False), (True, True), (None, True)])
async def test_the_lexical_leg_prunes_as_the_settings_say(
    monkeypatch: pytest.MonkeyPatch, pruning: bool | None, prunes: bool
) -> None:
    calls: list[dict[str, Any]] = []

    async def lexical(_pool: Any, _query: str, k: int, *_: Any, **kwargs: Any) -> list[Scored]:
        calls.append(kwargs)
        return [Scored("a", 2.0), Scored("b", 1.0)][:k]

    async def rows(_pool: Any, ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        base = {"section": None, "source": "pubmed", "pmid": None, "pmcid": None, "doi": None, "journal": None}
        return {
            c: {
                **base,
                **{"chunk_id": c, "document_id": f"doc-{c}", "content": c, "embedding_text": c, "source_id": c},
                **{"title": c, "year": None, "study_type": None, "evidence_level": None, "priority": 50},
                "icite_pmid": None,
            }
            for c in ids
        }

    monkeypatch.setattr(retrieve_stage, "bm25_rank", lexical)
    monkeypatch.setattr(hydrate_stage, "hit_rows", rows)
    settings = RetrievalSettings() if pruning is None else RetrievalSettings(bm25_pruning=pruning)  # type: ignore[call-arg]
    engine = SearchEngine.from_settings(None, None, settings, stats=_Stats())  # type: ignore[arg-type]
    result = await engine.search("q", np.ones(3), mode="lexical", top_k=2, top_n=2, filters=SearchFilters())
    assert [h.chunk_id for h in result.hits] == ["a", "b"]
    assert len(calls) == 1 and calls[0]["pruning"] is prunes
