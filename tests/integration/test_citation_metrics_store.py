"""Citation metrics on a real PostgreSQL 18 + pgvector (migration 212): ``evidentia import icite`` and the
loader (batched COPY + upsert on PMID, blank fields NULL, malformed rows skipped and counted, a re-import
replacing only its own PMIDs, a file without the columns refused), then search: ``min_citation_count`` and
``min_nih_percentile`` in the dense, BM25, full-text and hybrid legs (a document without metrics fails them) and
hits carrying ``citation_metrics``.

Only PostgreSQL is started (a private cluster), not the service stack.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import numpy as np
import pytest

from services.parser.store import store_document
from services.retriever.engine.config import SearchConfig
from services.retriever.engine.lexical.postings import Bm25Scoring
from services.retriever.engine.lexical.rank import Bm25Params, bm25_rank, bm25_search
from services.retriever.engine.lexical.stats import CorpusStats
from services.retriever.engine.pipeline import SearchEngine
from services.retriever.engine.scored import Scored
from services.retriever.engine.vector.search import dense_search
from services.retriever.engine.vector.tables import VectorIndex
from shared.db import create_pool
from shared.icite.parse import read_icite
from shared.icite.store import citation_metrics_of, load_icite
from shared.models import Chunk, CitationMetrics, ParsedDocument, SearchFilters
from shared.settings import DatabaseSettings
from tests.integration.db import index_random_vectors

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "icite" / "icite_metadata.csv"
HEADER = FIXTURE.read_text(encoding="utf-8").splitlines()[0]
DIM = 8


def cli(*argv: str, url: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "EVIDENTIA_DATABASE_URL": url, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "cli.main", *argv], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )


async def test_the_cli_loads_the_fixture_and_a_reimport_replaces_only_its_pmids(
    private_pool: asyncpg.Pool, migrated_postgres_url: str
) -> None:
    pool = private_pool
    await pool.execute("TRUNCATE citation_metrics")
    done = cli("import", "icite", str(FIXTURE), "--json", url=migrated_postgres_url)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert {k: report[k] for k in ("loaded", "inserted", "updated", "skipped")} == {
        "loaded": 4,
        "inserted": 4,
        "updated": 0,
        "skipped": 4,
    }
    assert [b["line"] for b in report["bad_rows"]] == [6, 7, 8, 9]
    stored = await citation_metrics_of(pool, ["23456789", "39000001", "39000003", "39000004"])
    assert set(stored) == {"23456789", "39000001", "39000003"}
    assert stored["23456789"]["citation_count"] == 46 and stored["23456789"]["nih_percentile"] == 71.0
    blank = stored["39000003"]  # blank fields are NULL, not 0
    assert blank["relative_citation_ratio"] is None and blank["nih_percentile"] is None and blank["apt"] is None
    assert blank["citation_count"] == 3 and blank["provisional"] is True
    before = await pool.fetchval("SELECT updated_at FROM citation_metrics WHERE pmid = '39000002'")

    again = HEADER.split(",")
    row = {c: "" for c in again} | {
        "pmid": "39000001",
        "citation_count": "300",
        "relative_citation_ratio": "4.5",
        "nih_percentile": "96.0",
        "year": "2019",
    }
    new = row | {"pmid": "39000010", "citation_count": "1", "nih_percentile": "5"}
    text = HEADER + "\n" + "\n".join(",".join(r[c] for c in again) for r in (row, new)) + "\n"
    async with pool.acquire() as conn:
        result = await load_icite(conn, read_icite(io.StringIO(text, newline="")), batch_size=1)
    assert (result.inserted, result.updated, result.skipped) == (1, 1, 0)
    stored = await citation_metrics_of(pool, ["39000001", "39000002", "39000010"])
    assert stored["39000001"]["citation_count"] == 300 and stored["39000001"]["apt"] is None  # replaced whole
    assert stored["39000002"]["citation_count"] == 12 and stored["39000002"]["updated_at"] == before  # untouched
    assert stored["39000010"]["nih_percentile"] == 5.0


async def test_a_file_without_the_metric_columns_is_refused(
    private_pool: asyncpg.Pool, migrated_postgres_url: str, tmp_path: Path
) -> None:
    await private_pool.execute("TRUNCATE citation_metrics")
    wrong = tmp_path / "pubs.csv"
    wrong.write_text("pmid,title,year\n1,A paper,2020\n", encoding="utf-8")
    done = cli("import", "icite", str(wrong), url=migrated_postgres_url)
    assert done.returncode == 65, done.stderr
    assert "missing column(s) citation_count, relative_citation_ratio, nih_percentile" in done.stderr
    assert "Traceback" not in done.stderr
    assert await private_pool.fetchval("SELECT count(*) FROM citation_metrics") == 0
    assert cli("import", "icite", str(tmp_path / "none.csv"), url=migrated_postgres_url).returncode == 66


# PMIDs of the fixture: 39000001 (250 citations, 95.3rd percentile), 39000002 (12, 41.7), 39000003 (3, no
# percentile); 39000009 has no metrics; the PMC article no PMID.
PMIDS = ("39000001", "39000002", "39000003", "39000009")


def doc(pmid: str | None, text: str) -> ParsedDocument:
    chunk = Chunk(section="Abstract", ordinal=0, text=text, token_count=8, char_start=0, char_end=len(text))
    if pmid is None:
        return ParsedDocument(
            source="pmc", source_id="PMC7000001", pmcid="PMC7000001", title="Fasting", abstract=text, chunks=[chunk]
        )
    return ParsedDocument(source_id=pmid, pmid=pmid, title=f"Fasting {pmid}", abstract=text, chunks=[chunk])


@pytest.fixture(scope="module")
async def corpus(migrated_postgres_url: str) -> AsyncIterator[tuple[asyncpg.Pool, VectorIndex, np.ndarray]]:
    db = DatabaseSettings.model_validate({"EVIDENTIA_DATABASE_URL": migrated_postgres_url})
    pool = await create_pool(db)
    await pool.execute("TRUNCATE documents CASCADE")
    await pool.execute("TRUNCATE citation_metrics")
    for pmid in (*PMIDS, None):
        await store_document(pool, doc(pmid, f"Intermittent fasting and migraine frequency, study {pmid}."))
    with FIXTURE.open(encoding="utf-8", newline="") as f:
        async with pool.acquire() as conn:
            await load_icite(conn, read_icite(f))
    index, vectors = await index_random_vectors(pool, db, "icite-test-model", DIM, seed=7)
    try:
        yield pool, index, vectors[0]
    finally:
        await pool.close()


async def found(pool: asyncpg.Pool, index: VectorIndex, query: np.ndarray, filters: SearchFilters) -> list[set[str]]:
    """The documents each leg returns under ``filters``: dense, BM25 (best chunks checked against the filters),
    BM25 resolved filter-first."""
    dense = await dense_search(pool, index, query, 50, filters, ef_search=40)
    bm25 = await bm25_search(pool, "fasting migraine", 50, filters, Bm25Params(), CorpusStats())
    first = await _bm25_filter_first(pool, "migraine", filters)
    doc_of = {r["chunk_id"]: r["document_id"] for r in await pool.fetch("SELECT chunk_id, document_id FROM chunks")}
    return [{doc_of[s.chunk_id] for s in leg} for leg in (dense, bm25, first)]


async def test_citation_filters_in_every_leg(corpus: tuple) -> None:  # type: ignore[type-arg]
    pool, index, query = corpus
    everyone = {f"pubmed:{p}" for p in PMIDS} | {"pmc:PMC7000001"}
    assert await found(pool, index, query, SearchFilters()) == [everyone] * 3
    cited = {"pubmed:39000001", "pubmed:39000002"}
    assert await found(pool, index, query, SearchFilters(min_citation_count=10)) == [cited] * 3
    # 0 still needs metrics: documents without an iCite row (no PMID, or none imported) fail the filter.
    with_metrics = {"pubmed:39000001", "pubmed:39000002", "pubmed:39000003"}
    assert await found(pool, index, query, SearchFilters(min_citation_count=0)) == [with_metrics] * 3
    top = {"pubmed:39000001"}
    assert await found(pool, index, query, SearchFilters(min_nih_percentile=90)) == [top] * 3
    # A blank percentile (39000003) fails any percentile bound, 0 included.
    assert await found(pool, index, query, SearchFilters(min_nih_percentile=0)) == [cited] * 3
    both = SearchFilters(min_citation_count=100, min_nih_percentile=40)
    assert await found(pool, index, query, both) == [top] * 3


async def test_hybrid_hits_carry_their_citation_metrics(corpus: tuple) -> None:  # type: ignore[type-arg]
    pool, index, query = corpus
    searcher = SearchEngine(pool, index, SearchConfig(ef_search=40))
    result = await searcher.search(
        "fasting migraine", query, mode="hybrid", top_k=10, top_n=10, filters=SearchFilters()
    )
    metrics = {h.document_id: h.citation_metrics for h in result.hits}
    assert metrics["pubmed:39000001"] == CitationMetrics(
        citation_count=250, relative_citation_ratio=4.12, nih_percentile=95.3, year=2019, provisional=False
    )
    assert metrics["pubmed:39000003"] == CitationMetrics(citation_count=3, year=2025, provisional=True)
    assert metrics["pubmed:39000009"] is None and metrics["pmc:PMC7000001"] is None
    filtered = await searcher.search(
        "fasting migraine", query, mode="hybrid", top_k=10, top_n=10, filters=SearchFilters(min_nih_percentile=90)
    )
    assert [h.document_id for h in filtered.hits] == ["pubmed:39000001"]


async def _bm25_filter_first(pool: asyncpg.Pool, query: str, filters: SearchFilters) -> list[Scored]:
    """BM25 with the filter resolved first (the path of a selective filter)."""
    p = Bm25Params()
    scoring = Bm25Scoring(p.k1, p.b, p.title_weight, p.section_weight, await CorpusStats().get(pool))
    return await bm25_rank(pool, query, 50, filters, scoring, filter_first_max=10_000)
