"""The whole flow over real Kafka and PostgreSQL: PMIDs in -> chunks in pgvector -> search -> cited answer."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import pytest

from tests.integration.conftest import Stack
from tests.integration.db import db_fetch

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@dataclass(frozen=True)
class Ingested:
    pmids: list[str]
    status: dict[str, Any]
    job_id: str


@pytest.fixture(scope="module")
def ingested(stack: Stack) -> Ingested:
    pmids = stack.fake.pubmed_ids
    assert len(pmids) >= 5, "the fake E-utilities server should hold the recorded PubMed records"
    with stack.http() as http:
        r = http.post("/v1/ingest", json={"pmids": pmids})
        assert r.status_code == 202, r.text
        job_id = r.json()["job_id"]
    status = stack.wait_job(job_id)
    return Ingested(list(pmids), status, job_id)


def test_every_pmid_is_fetched_parsed_and_embedded(stack: Stack, ingested: Ingested) -> None:
    pmids = ingested.pmids
    status = ingested.status
    assert status["done"], status
    assert status["total"] == len(pmids)
    assert status["counts"]["embedded"] == len(pmids), status
    url = stack.infra.postgres.url
    rows = db_fetch(url, "SELECT pmid FROM documents WHERE pmid = ANY($1::text[])", pmids)
    assert sorted(r["pmid"] for r in rows) == sorted(pmids)
    table = db_fetch(url, "SELECT table_name FROM vector_indexes WHERE state = 'active'")[0]["table_name"]
    counts = db_fetch(
        url,
        f"""SELECT count(c.chunk_id) AS chunks, count(v.chunk_id) AS vectors
            FROM chunks c JOIN documents d USING (document_id) LEFT JOIN {table} v ON v.chunk_id = c.chunk_id
            WHERE d.pmid = ANY($1::text[])""",
        pmids,
    )[0]
    assert counts["chunks"] >= len(pmids)
    assert counts["vectors"] == counts["chunks"]


def test_search_finds_a_document_by_its_title(stack: Stack, ingested: Ingested) -> None:
    url = stack.infra.postgres.url
    doc = db_fetch(
        url,
        "SELECT pmid, title FROM documents WHERE pmid = ANY($1::text[]) AND length(title) > 30 ORDER BY pmid LIMIT 1",
        ingested.pmids,
    )[0]  # type: ignore[call-overload]
    for mode in ("dense", "lexical", "hybrid"):
        with stack.http() as http:
            r = http.post("/v1/search", json={"query": doc["title"], "mode": mode, "top_n": 3})
        assert r.status_code == 200, r.text
        hits = r.json()["hits"]
        assert hits, mode
        assert hits[0]["pmid"] == doc["pmid"], (mode, [h["pmid"] for h in hits])


def test_ask_cites_only_real_sample_pmids(stack: Stack, ingested: Ingested) -> None:
    url = stack.infra.postgres.url
    doc = db_fetch(
        url,
        "SELECT pmid, title FROM documents WHERE pmid = ANY($1::text[]) AND length(title) > 30 "
        "ORDER BY pmid DESC LIMIT 1",
        ingested.pmids,
    )[0]  # type: ignore[call-overload]
    with stack.http() as http:
        r = http.post("/v1/ask", json={"question": f"What is known about {doc['title']}?"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["mode"] == "extractive"
    assert body["citations"], body
    cited = {c["citation_id"].removeprefix("PMID:") for c in body["citations"]}
    assert cited <= set(ingested.pmids)
    assert body["citation_check"]["removed"] == []
    assert "[PMID:" in body["answer"]
    assert body["disclaimer"]


def test_invalid_requests_get_4xx_with_a_reason(stack: Stack) -> None:
    with stack.http() as http:
        r = http.post("/v1/ask", json={"question": ""})
        assert r.status_code == 422
        assert "question" in r.text
        r = http.post("/v1/ingest", json={"pmids": ["12a"]})
        assert r.status_code == 422
        assert "digits" in r.text
        r = http.get("/v1/ingest/nope")
        assert r.status_code == 404


def test_the_running_retriever_compacts_the_lexical_index(stack: Stack, ingested: Ingested) -> None:
    """Each stored document appended one small posting block per term; the retriever merges them in the
    background (EVIDENTIA_RETRIEVAL_BM25_COMPACT_EVERY_S), so a common term does not stay one block a document."""
    url = stack.infra.postgres.url
    deadline = time.monotonic() + 60
    while db_fetch(url, "SELECT count(*) AS n FROM bm25_pending")[0]["n"] and time.monotonic() < deadline:
        time.sleep(1)
    assert db_fetch(url, "SELECT count(*) AS n FROM bm25_pending")[0]["n"] == 0
    widest = db_fetch(
        url,
        "SELECT t.df, count(*) AS blocks FROM bm25_blocks b JOIN bm25_terms t USING (term_id) "
        "GROUP BY t.term_id, t.df ORDER BY t.df DESC LIMIT 1",
    )[0]
    assert widest["df"] >= 5  # the most common term came in at least 5 blocks (a chunk is a block at most) ...
    assert widest["blocks"] <= 4  # ... and they were merged since
