"""The fetcher's store (recorded searches, de-duplication) and discovery on a real PostgreSQL with the fake
E-utilities.

Marked ``integration``: it runs on a PostgreSQL server of its own (``private_postgres`` in conftest.py).
"""

from __future__ import annotations

import re
from pathlib import Path

import asyncpg
import pytest

from services.fetcher import store as fetcher_store
from services.fetcher.discovery import discover
from services.fetcher.eutils import EutilsClient, EutilsQueryError
from services.fetcher.sources import pmid_sources
from services.fetcher.sources.pubmed import fetch_pubmed
from shared.db import jobs
from shared.events import IngestRequested, SourceRequest
from tests.fakes.eutils_server import DEFAULT_RECORDS_DIR as FIXTURES
from tests.fakes.eutils_server import FakeEutils, fake_ncbi_settings

pytestmark = pytest.mark.integration

CANCER = re.findall(r"<Id>(\d+)</Id>", (FIXTURES / "esearch2.xml").read_text())


async def _store(private_pool: asyncpg.Pool, pmids: list[str]) -> None:
    """Pretend the parser stored these PubMed documents."""
    await private_pool.executemany(
        """INSERT INTO documents (document_id, source, source_id, pmid, title, content_hash)
           VALUES ($1, 'pubmed', $2, $2, 'stored', 'h') ON CONFLICT DO NOTHING""",
        [(f"pubmed:{p}", p) for p in pmids],
    )


# ------------------------------------------------------------------------------------------ searches


async def test_search_cache_with_ttl(private_pool: asyncpg.Pool) -> None:
    q = "metformin AND diabetes"
    await fetcher_store.record_search(private_pool, "  metformin   AND diabetes ", "pubmed", 100, 250, ["3", "2", "1"])
    assert await fetcher_store.cached_search(private_pool, q, "pubmed", 100, 3600) == ["3", "2", "1"]
    assert await fetcher_store.cached_search(private_pool, q, "pubmed", 2, 3600) == ["3", "2"]
    assert await fetcher_store.cached_search(private_pool, q, "pubmed", 500, 3600) is None  # more wanted than recorded
    assert await fetcher_store.cached_search(private_pool, q, "pmc", 100, 3600) is None
    assert await fetcher_store.cached_search(private_pool, q, "pubmed", 100, 0) is None
    await private_pool.execute("UPDATE search_queries SET searched_at = now() - interval '6 days'")
    assert await fetcher_store.cached_search(private_pool, q, "pubmed", 100, 5 * 24 * 3600) is None
    # a search that already took every hit answers a larger cap too
    await fetcher_store.record_search(private_pool, "rare thing", "pubmed", 10, 3, ["7", "8", "9"])
    assert await fetcher_store.cached_search(private_pool, "rare thing", "pubmed", 500, 3600) == ["7", "8", "9"]


async def test_filter_new_pmids(private_pool: asyncpg.Pool) -> None:
    await _store(private_pool, ["2", "4"])
    assert await fetcher_store.filter_new_pmids(private_pool, ["1", "2", "3", "1", "4", " 5 ", "3"]) == ["1", "3", "5"]
    assert await fetcher_store.filter_new_pmids(private_pool, ["1", "2", "1"], refresh=True) == ["1", "2"]


# ------------------------------------------------------------------------------------------ stages


async def test_stage_rules(private_pool: asyncpg.Pool) -> None:
    d = "pubmed:1"
    await jobs.set_stage(private_pool, [d, d], "discovered")
    await jobs.set_stage(private_pool, [d], "embedded")
    await jobs.set_stage(private_pool, [d], "discovered")  # a replayed event: ignored
    await jobs.set_stage(private_pool, [d], "fetched")
    assert await jobs.stages(private_pool, [d]) == {d: "embedded"}
    await jobs.set_stage(private_pool, [d], "failed", "efetch: gave up")  # a failed re-fetch keeps embedded
    row = await private_pool.fetchrow("SELECT stage, error FROM document_status WHERE document_id = $1", d)
    assert (row["stage"], row["error"]) == ("embedded", "efetch: gave up")
    await jobs.set_stage(private_pool, [d], "discovered", force=True)  # a user's refresh starts over
    assert await jobs.stages(private_pool, [d]) == {d: "discovered"}

    await jobs.set_stage(private_pool, ["pubmed:2"], "fetched")
    await jobs.set_stage(private_pool, ["pubmed:2"], "failed", "parse error")
    await jobs.set_stage(private_pool, ["pubmed:2"], "fetched")  # a retry that worked moves on
    row = await private_pool.fetchrow("SELECT stage, error FROM document_status WHERE document_id = 'pubmed:2'")
    assert (row["stage"], row["error"]) == ("fetched", None)

    await jobs.set_stage(private_pool, ["pubmed:3"], "embedded")
    await jobs.set_stage(private_pool, ["pubmed:3"], "deleted")  # DeleteCitation always wins
    await jobs.set_stage(private_pool, ["pubmed:3"], "embedded")  # a stale event cannot resurrect it
    await jobs.set_stage(private_pool, ["pubmed:3"], "failed", "x")
    assert await jobs.stages(private_pool, ["pubmed:3"]) == {"pubmed:3": "deleted"}
    await jobs.set_stage(private_pool, ["pubmed:3"], "fetched", force=True)
    assert await jobs.stages(private_pool, ["pubmed:3"]) == {"pubmed:3": "fetched"}


async def test_job_status(private_pool: asyncpg.Pool) -> None:
    assert await jobs.job_status(private_pool, "nope") is None
    assert await jobs.create_job(private_pool, "job-1", "pmids", {"pmids": ["1", "2", "3", "4"]})
    assert not await jobs.create_job(private_pool, "job-1", "pmids", {})
    docs = [f"pubmed:{i}" for i in range(1, 6)]
    assert await jobs.add_job_documents(private_pool, "job-1", docs + docs[:2]) == 5
    await _store(private_pool, ["5"])  # stored earlier by another path, no status row
    await jobs.set_stage(private_pool, docs[:4], "discovered")
    await jobs.set_stage(private_pool, docs[:2], "embedded")
    await jobs.set_stage(private_pool, [docs[2]], "failed", "PMID not returned by efetch")
    status = await jobs.job_status(private_pool, "job-1")
    assert status is not None
    assert status.total == 5 and status.state == "running"
    assert status.params == {"pmids": ["1", "2", "3", "4"]}
    nonzero = {k: v for k, v in status.counts.items() if v}
    assert nonzero == {"embedded": 2, "failed": 1, "discovered": 1, "parsed": 1}
    failures = [(f.document_id, f.error) for f in status.failures]
    assert failures == [("pubmed:3", "PMID not returned by efetch")]
    assert status.reached("fetched") == 3 and not status.done
    await jobs.set_job_state(private_pool, "job-1", "discovered")
    await jobs.set_stage(private_pool, ["pubmed:4", "pubmed:5"], "embedded")
    status = await jobs.job_status(private_pool, "job-1")
    assert status is not None and status.done


# ------------------------------------------------------------------------------------------ discover


async def test_discover_searches_once_dedups_and_records_the_job(
    private_pool: asyncpg.Pool, client: EutilsClient, fake_eutils: FakeEutils
) -> None:
    settings = fake_ncbi_settings(fake_eutils)
    await _store(private_pool, [CANCER[1]])
    pubmed = SourceRequest(source="pubmed", query="cancer", ids=[CANCER[0], "9997", "9997", "x"])
    req = IngestRequested(job_id="job-q", sources=[pubmed], max_results=50)
    # The fake may be the session's (the integration stack shares it): count this test's searches only.
    before = len(fake_eutils.requests_to("esearch"))
    new = await discover(req, pmid_sources(client, private_pool, settings), private_pool)
    assert new == [p for p in CANCER[:50] if p != CANCER[1]] + ["9997"]
    searches = len(fake_eutils.requests_to("esearch")) - before
    assert searches == 2  # 50 ids in pages of 30

    again = await discover(
        req.model_copy(update={"job_id": "job-q2"}), pmid_sources(client, private_pool, settings), private_pool
    )
    assert again == new and len(fake_eutils.requests_to("esearch")) - before == searches  # answered from the record
    status = await jobs.job_status(private_pool, "job-q")
    assert status is not None and status.total == 51 and status.state == "discovered"
    assert status.counts["discovered"] == 50 and status.counts["parsed"] == 1

    await discover(
        req.model_copy(update={"job_id": "job-r", "refresh": True}),
        pmid_sources(client, private_pool, settings),
        private_pool,
    )
    assert len(fake_eutils.requests_to("esearch")) - before > searches  # refresh searches NCBI again


async def test_a_killed_fetcher_resumes_and_stores_each_pmid_once(
    private_pool: asyncpg.Pool, client: EutilsClient, fake_eutils: FakeEutils
) -> None:
    settings = fake_ncbi_settings(fake_eutils, efetch_batch=2)
    known = ["12091962", "9997", "11748933", "11700088", "27797938", "17284678", "20301295"]
    fake_eutils.add_search("recorded papers", known)
    req = IngestRequested(job_id="job-k", sources=[SourceRequest(source="pubmed", query="recorded papers")])
    stored: list[str] = []

    first = await discover(req, pmid_sources(client, private_pool, settings), private_pool)
    assert first == known
    async for event in fetch_pubmed(first, client, batch_size=2):
        stored.append(event.source_id)
        await _store(private_pool, [event.source_id])
        if len(stored) == 3:
            break  # the fetcher is killed mid-job

    second = await discover(
        req, pmid_sources(client, private_pool, settings), private_pool
    )  # Kafka redelivers the request
    assert second == known[3:]
    async for event in fetch_pubmed(second, client, batch_size=2):
        stored.append(event.source_id)
        await _store(private_pool, [event.source_id])
    assert sorted(stored) == sorted(known) and len(stored) == len(set(stored))
    assert await fetcher_store.filter_new_pmids(private_pool, known) == []


async def test_a_bad_query_fails_the_job_with_the_reason(
    private_pool: asyncpg.Pool, client: EutilsClient, fake_eutils: FakeEutils
) -> None:
    bad = SourceRequest(source="pubmed", query="obstetrics[MeSH Terms] AND fleegle[MeSH Terms]")
    req = IngestRequested(job_id="job-bad", sources=[bad])
    with pytest.raises(EutilsQueryError):
        await discover(req, pmid_sources(client, private_pool, fake_ncbi_settings(fake_eutils)), private_pool)
    status = await jobs.job_status(private_pool, "job-bad")
    assert status is not None and status.state == "failed" and "PhraseNotFound" in (status.error or "")
    assert status.done


def test_fixture_ids_are_real() -> None:
    assert len(CANCER) == 100 and Path(FIXTURES / "esearch2.xml").exists()
