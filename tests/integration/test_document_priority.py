"""Issue 19 item 5 through the running services: document priority set at ingestion (per document, per job,
also for documents already stored) and by ``PATCH /v1/documents/{id}``; priority 0 never returned by
``/v1/search`` or ``/v1/ask``; the ``min_priority`` filter (extractive mode, real Kafka and PostgreSQL)."""

from __future__ import annotations

import asyncio
import hashlib
from typing import Any

import asyncpg
import httpx
import pytest

from tests.integration.conftest import Stack
from tests.integration.gateways import extra_gateway

pytestmark = [pytest.mark.integration, pytest.mark.slow]

DOC_ID = "pmc:PMC9919002"
QUERY = "zinc lozenges shorten the common cold"


def _inline(priority: int) -> dict[str, Any]:
    text = "Zinc acetate lozenges shortened the duration of the common cold by three days in adults."
    return {
        "source": "pmc",
        "source_id": "PMC9919002",
        "pmcid": "PMC9919002",
        "title": "Zinc lozenges and the duration of the common cold: a randomised trial",
        "abstract": text,
        "year": 2020,
        "priority": priority,
    }


def _search(http: Any, **filters: Any) -> list[dict[str, Any]]:
    r = http.post("/v1/search", json={"query": QUERY, "mode": "hybrid", "top_n": 20, "filters": filters})
    assert r.status_code == 200, r.text
    hits: list[dict[str, Any]] = r.json()["hits"]
    return hits


def test_priority_from_ingestion_patch_and_search(stack: Stack, sample_pmids: list[str]) -> None:
    with stack.http() as http:
        r = http.post("/v1/ingest", json={"documents": [_inline(0)]})
        assert r.status_code == 202, r.text
        assert stack.wait_job(r.json()["job_id"])["done"]
        assert DOC_ID not in {h["document_id"] for h in _search(http)}  # stored, but excluded (0)
        ask = http.post("/v1/ask", json={"question": "Do zinc lozenges shorten the common cold?"}).json()
        assert DOC_ID not in {s["document_id"] for s in ask["sources"]}

        r = http.patch(f"/v1/documents/{DOC_ID}", json={"priority": 100})
        assert r.status_code == 200 and r.json() == {"document_id": DOC_ID, "priority": 100}
        hits = _search(http)
        assert hits[0]["document_id"] == DOC_ID and hits[0]["priority"] == 100
        assert {h["document_id"] for h in _search(http, min_priority=100)} == {DOC_ID}  # the rest are 50
        ask = http.post("/v1/ask", json={"question": "Do zinc lozenges shorten the common cold?"}).json()
        assert DOC_ID in {s["document_id"] for s in ask["sources"]}

        assert http.patch("/v1/documents/pmc:PMC0", json={"priority": 10}).status_code == 404
        assert http.patch(f"/v1/documents/{DOC_ID}", json={"priority": 500}).status_code == 422
        assert http.patch(f"/v1/documents/{DOC_ID}", json={"priority": 0}).status_code == 200
        assert DOC_ID not in {h["document_id"] for h in _search(http)}


def _title(stack: Stack, document_id: str) -> str:
    async def run() -> str:
        conn = await asyncpg.connect(stack.infra.postgres.url)
        try:
            return str(await conn.fetchval("SELECT title FROM documents WHERE document_id = $1", document_id))
        finally:
            await conn.close()

    return asyncio.run(run())


def test_a_job_priority_reaches_documents_already_stored(stack: Stack, sample_pmids: list[str]) -> None:
    doc = f"pubmed:{sample_pmids[0]}"
    by_title = {"query": _title(stack, doc), "mode": "lexical", "top_n": 20}
    with stack.http() as http:
        r = http.post("/v1/ingest", json={"pmids": [sample_pmids[0]], "priority": 10})  # stored: not fetched again
        assert r.status_code == 202, r.text
        assert stack.wait_job(r.json()["job_id"])["done"]
        hits = http.post("/v1/search", json=by_title).json()["hits"]
        assert {h["priority"] for h in hits if h["document_id"] == doc} == {10}
        bounded = http.post("/v1/search", json={**by_title, "filters": {"min_priority": 50}}).json()["hits"]
        assert doc not in {h["document_id"] for h in bounded}
        r = http.patch(f"/v1/documents/{doc}", json={"priority": 50})  # back to normal for the other tests
        assert r.status_code == 200


def test_an_ingest_key_cannot_hide_a_stored_record_an_admin_key_can(stack: Stack, sample_pmids: list[str]) -> None:
    """Issue 40 point 7 as tried: ``POST /v1/ingest {"pmids": [stored], "priority": 0}`` with an ``ingest`` key
    (202) hid the PubMed record from every search. The record stays found, fetched again or not; the job's
    priority still reaches what the job creates; an ``admin`` key may re-prioritise stored documents."""
    ingester, admin = "ingest-key-40-0987654321", "admin-key-40-5555555555"
    digest = {k: hashlib.sha256(k.encode()).hexdigest() for k in (ingester, admin)}
    env = {"EVIDENTIA_GATEWAY_API_KEY_HASHES": f"{digest[ingester]}:ingest, {digest[admin]}:admin"}
    doc = f"pubmed:{sample_pmids[1]}"
    by_title = {"query": _title(stack, doc), "mode": "lexical", "top_n": 20}

    def priority_found(http: Any) -> set[int]:
        hits = http.post("/v1/search", json=by_title).json()["hits"]
        return {h["priority"] for h in hits if h["document_id"] == doc}

    with extra_gateway(stack, "priority-scopes", env) as url:
        with httpx.Client(base_url=url, timeout=60, headers={"Authorization": f"Bearer {ingester}"}) as http:
            assert priority_found(http) == {50}
            for refresh in (False, True):  # attached as stored (the trigger); fetched again (the parser's store)
                r = http.post("/v1/ingest", json={"pmids": [sample_pmids[1]], "priority": 0, "refresh": refresh})
                assert r.status_code == 202, r.text
                assert stack.wait_job(r.json()["job_id"])["done"]
                assert priority_found(http) == {50}
            new = {**_inline(0), "source_id": "PMC9919040", "pmcid": "PMC9919040", "priority": None}
            r = http.post("/v1/ingest", json={"documents": [new], "priority": 10})  # created by the job
            assert r.status_code == 202 and stack.wait_job(r.json()["job_id"])["done"]
            assert asyncio.run(_priority(stack, "pmc:PMC9919040")) == 10
        with httpx.Client(base_url=url, timeout=60, headers={"Authorization": f"Bearer {admin}"}) as http:
            r = http.post("/v1/ingest", json={"pmids": [sample_pmids[1]], "priority": 10})
            assert r.status_code == 202 and stack.wait_job(r.json()["job_id"])["done"]
            assert priority_found(http) == {10}
            assert http.patch(f"/v1/documents/{doc}", json={"priority": 50}).status_code == 200  # for other tests


async def _priority(stack: Stack, document_id: str) -> int:
    conn = await asyncpg.connect(stack.infra.postgres.url)
    try:
        return int(await conn.fetchval("SELECT priority FROM documents WHERE document_id = $1", document_id))
    finally:
        await conn.close()
