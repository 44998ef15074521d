"""Issue 19 item 7 through the running services: ``DELETE /v1/conversations/{id}``, the retention job of a
running gateway, and the ``sections`` filter of ``/v1/search`` and ``/v1/ask`` over real Kafka and PostgreSQL
(extractive mode: no API key)."""

from __future__ import annotations

import asyncio
import re
import time
from typing import Any

import asyncpg
import httpx
import pytest

from services.parser.chunking import FullTextBuilder
from tests.integration.conftest import Stack
from tests.integration.gateways import extra_gateway

pytestmark = [pytest.mark.integration, pytest.mark.slow]

QUESTION = "Does telephone counseling increase mammography screening?"


def _db(stack: Stack, sql: str, *args: Any) -> Any:
    async def run() -> Any:
        conn = await asyncpg.connect(stack.infra.postgres.url)
        try:
            return await conn.fetchval(sql, *args)
        finally:
            await conn.close()

    return asyncio.run(run())


def _turns(stack: Stack, cid: str) -> int:
    return int(_db(stack, "SELECT count(*) FROM conversation_messages WHERE conversation_id = $1", cid))


def test_a_conversation_is_deleted_with_its_turns(stack: Stack, sample_pmids: list[str]) -> None:
    with stack.http() as http:
        first = http.post("/v1/ask", json={"question": QUESTION})
        assert first.status_code == 200, first.text
        cid = first.json()["conversation_id"]
        assert http.post("/v1/ask", json={"question": "And reminders?", "conversation_id": cid}).status_code == 200
        assert _turns(stack, cid) == 4
        assert http.get(f"/v1/conversations/{cid}").status_code == 200

        r = http.delete(f"/v1/conversations/{cid}")
        assert r.status_code == 204 and r.content == b""
        assert _turns(stack, cid) == 0
        assert _db(stack, "SELECT count(*) FROM conversation_citations WHERE conversation_id = $1", cid) == 0
        assert http.get(f"/v1/conversations/{cid}").status_code == 404
        assert http.delete(f"/v1/conversations/{cid}").status_code == 404
        follow_up = http.post("/v1/ask", json={"question": "And letters?", "conversation_id": cid})
        assert follow_up.status_code == 404
        assert _db(stack, "SELECT count(*) FROM conversations WHERE conversation_id = $1", cid) == 0


def _deleted_by_retention(metrics_text: str) -> float:
    m = re.search(r'^evidentia_conversations_deleted_total\{reason="retention"\} (\S+)$', metrics_text, re.M)
    return float(m.group(1)) if m else 0.0


def test_a_running_gateway_deletes_idle_conversations(stack: Stack, sample_pmids: list[str]) -> None:
    with stack.http() as http:
        ids = [http.post("/v1/ask", json={"question": QUESTION}).json()["conversation_id"] for _ in range(2)]
    idle, fresh = ids
    _db(stack, "UPDATE conversations SET updated_at = now() - interval '3 days' WHERE conversation_id = $1", idle)
    env = {
        "EVIDENTIA_GATEWAY_CONVERSATION_RETENTION_DAYS": "2",
        "EVIDENTIA_GATEWAY_CONVERSATION_RETENTION_INTERVAL_S": "0.5",
        "EVIDENTIA_GATEWAY_CONVERSATION_RETENTION_BATCH": "1",
    }
    with extra_gateway(stack, "retention", env) as url, httpx.Client(base_url=url, timeout=30) as http:
        deadline = time.monotonic() + 30
        while _db(stack, "SELECT count(*) FROM conversations WHERE conversation_id = $1", idle):
            assert time.monotonic() < deadline, "the retention job did not delete the idle conversation"
            time.sleep(0.25)
        assert _turns(stack, idle) == 0
        assert http.get(f"/v1/conversations/{idle}").status_code == 404
        assert http.get(f"/v1/conversations/{fresh}").status_code == 200  # active: kept
        assert _deleted_by_retention(http.get("/metrics").text) >= 1
    with stack.http() as http:  # the session's gateway (retention 0) never deletes
        assert http.get(f"/v1/conversations/{fresh}").status_code == 200


SECTIONED = {
    "Background": "Dental caries in schoolchildren remains common despite fluoride toothpaste.",
    "Methods": "Schoolchildren chewed xylitol gum three times a day for two years; caries were counted by dentists.",
    "Results": "Xylitol gum reduced new caries lesions by 35 percent compared with no gum among schoolchildren.",
    "Conclusions": "Xylitol chewing gum is a useful addition to caries prevention in schoolchildren.",
}


def _sectioned_document() -> dict[str, Any]:
    builder = FullTextBuilder()
    for title, text in SECTIONED.items():
        builder.add(title, text)
    full_text, sections = builder.build()
    return {
        "source": "pmc",
        "source_id": "PMC9919001",
        "pmcid": "PMC9919001",
        "title": "Xylitol chewing gum and caries in schoolchildren: a cluster trial",
        "year": 2021,
        "full_text": full_text,
        "sections": [s.model_dump() for s in sections],
    }


@pytest.fixture(scope="module")
def sectioned(stack: Stack) -> str:
    with stack.http() as http:
        r = http.post("/v1/ingest", json={"documents": [_sectioned_document()]})
        assert r.status_code == 202, r.text
    status = stack.wait_job(r.json()["job_id"])
    assert status["done"], status
    return "pmc:PMC9919001"


@pytest.mark.parametrize("mode", ["dense", "lexical", "hybrid"])
def test_search_restricted_to_sections(stack: Stack, sectioned: str, mode: str) -> None:
    body: dict[str, Any] = {"query": "xylitol gum caries schoolchildren", "mode": mode, "top_n": 20}
    with stack.http() as http:
        everything = http.post("/v1/search", json=body).json()["hits"]
        mine = {h["section"] for h in everything if h["document_id"] == sectioned}
        assert mine == set(SECTIONED)  # unfiltered: every section of the paper is found
        only = http.post("/v1/search", json={**body, "filters": {"sections": ["results", "Conclusion"]}})
        assert only.status_code == 200, only.text
        hits = only.json()["hits"]
    assert {h["section"] for h in hits} == {"Results", "Conclusions"}
    assert {h["document_id"] for h in hits} == {sectioned}  # PubMed records are one section, "Abstract"


def test_ask_restricted_to_a_section(stack: Stack, sectioned: str) -> None:
    with stack.http() as http:
        r = http.post(
            "/v1/ask",
            json={
                "question": "Does xylitol gum prevent caries in schoolchildren?",
                "filters": {"sections": ["Results"]},
            },
        )
        assert r.status_code == 200, r.text
        body = r.json()
        bad = http.post("/v1/search", json={"query": "gum", "filters": {"sections": [""]}})
    assert body["sources"] and {s["section"] for s in body["sources"]} == {"Results"}
    assert "35 percent" in body["answer"]  # the extractive answer quotes the Results passage
    assert bad.status_code == 422
