"""Answers through the running services (offline mode): SSE, conversations in PostgreSQL, emergencies.

The session's synthesizer runs without an Anthropic key (extractive), as every integration test expects.
LLM mode is covered against the fake Anthropic server at the component level (tests/unit/synthesizer and
tests/unit/gateway): the same synthesizer core and gateway code, without the Kafka hop.
"""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
import pytest

from tests.integration.conftest import Stack
from tests.integration.test_pipeline import db_fetch

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture(scope="module")
def corpus(stack: Stack) -> dict[str, str]:
    """The recorded PubMed sample ingested; returns {pmid: title} of documents with a usable title."""
    pmids = stack.fake.pubmed_ids
    with stack.http() as http:
        r = http.post("/v1/ingest", json={"pmids": pmids})
        assert r.status_code == 202, r.text
        status = stack.wait_job(r.json()["job_id"])
    assert status["done"], status
    rows = db_fetch(
        stack.infra.postgres.url,
        "SELECT pmid, title FROM documents WHERE pmid = ANY($1::text[]) AND length(title) > 30 ORDER BY pmid",
        pmids,
    )
    return {r["pmid"]: r["title"] for r in rows}


def stream_events(http: httpx.Client, payload: dict[str, Any]) -> list[tuple[str, dict[str, Any], float]]:
    """(event, data, arrival time) for every server-sent event, read as they arrive."""
    events: list[tuple[str, dict[str, Any], float]] = []
    with http.stream("POST", "/v1/ask/stream", json=payload) as r:
        assert r.status_code == 200, r.read()
        assert r.headers["content-type"].startswith("text/event-stream")
        name, data = "message", ""
        for line in r.iter_lines():
            if line.startswith("event:"):
                name = line[6:].strip()
            elif line.startswith("data:"):
                data += line[5:].strip()
            elif not line and data:
                events.append((name, json.loads(data), time.monotonic()))
                name, data = "message", ""
    return events


def test_stream_sends_the_events_in_order_with_the_tokens_by_seq(stack: Stack, corpus: dict[str, str]) -> None:
    title = next(iter(corpus.values()))
    with stack.http() as http:
        events = stream_events(http, {"question": f"What is known about {title}?"})
    names = [n for n, _, _ in events]
    tokens = [d for n, d, _ in events if n == "token"]
    assert tokens, names
    searching = names.count("fetch")  # a PubMed search at question time (``fetch: auto``) reports first
    assert names == [
        *(["fetch"] * searching),
        "retrieval_done",
        *(["token"] * len(tokens)),
        "citations",
        "summary",
        "metrics",
        "done",
    ]
    assert [t["seq"] for t in tokens] == list(range(len(tokens)))
    retrieval = events[searching][1]
    assert retrieval["sources"] and retrieval["conversation_id"]
    cites = dict((n, d) for n, d, _ in events)["citations"]
    assert cites["mode"] == "extractive"
    assert "".join(t["text"] for t in tokens).startswith("Extractive answer")
    assert cites["citations"] and cites["citation_check"]["removed"] == []
    assert {c["citation_id"].removeprefix("PMID:") for c in cites["citations"]} <= set(stack.fake.pubmed_ids)
    assert "[1]" in cites["numbered_answer"]
    summary = dict((n, d) for n, d, _ in events)["summary"]
    assert summary["method"] == "extractive" and summary["strength"] in ("high", "moderate", "low")
    assert set(summary["supporting_pmids"]) <= set(stack.fake.pubmed_ids)
    metrics = dict((n, d) for n, d, _ in events)["metrics"]
    assert 0 < metrics["time_to_first_token_ms"] <= metrics["total_ms"]


def test_a_conversation_is_stored_numbered_and_followed_up(stack: Stack, corpus: dict[str, str]) -> None:
    title = list(corpus.values())[-1]
    with stack.http() as http:
        first = http.post("/v1/ask", json={"question": f"What is known about {title}?"}).json()
        cid = first["conversation_id"]
        assert first["turn"] == 1 and first["citations"], first
        r = http.post("/v1/ask", json={"question": "What about its effects in older adults?", "conversation_id": cid})
        assert r.status_code == 200, r.text
        second = r.json()
        view = http.get(f"/v1/conversations/{cid}")
        assert view.status_code == 200, view.text
        conv = view.json()
    assert second["turn"] == 2 and second["conversation_id"] == cid
    assert "follow-up to" in second["standalone_question"] and title[:20] in second["standalone_question"]
    # Chunks cited in turn 1 are offered again to turn 2's retrieval.
    cited_first = {
        s["chunk_id"] for s in first["sources"] if f"PMID:{s['pmid']}" in first["citation_check"]["verified"]
    }
    assert cited_first <= {s["chunk_id"] for s in second["sources"]}
    # Numbers are conversation-wide: a paper keeps its number, new ones continue the sequence.
    numbers_first = {c["citation_id"]: c["number"] for c in first["citations"]}
    for c in second["citations"]:
        if c["citation_id"] in numbers_first:
            assert c["number"] == numbers_first[c["citation_id"]]
        else:
            assert c["number"] > max(numbers_first.values())
    refs = [c["number"] for c in conv["references"]]
    assert refs == list(range(1, len(refs) + 1))
    assert [m["role"] for m in conv["messages"]] == ["user", "assistant", "user", "assistant"]
    assert conv["messages"][2]["standalone_question"] == second["standalone_question"]
    assert conv["messages"][1]["content"] == first["numbered_answer"]
    rows = db_fetch(
        stack.infra.postgres.url,
        "SELECT turn, role, cited_chunk_ids FROM conversation_messages WHERE conversation_id = $1 ORDER BY turn, role",
        cid,
    )
    assert [(r["turn"], r["role"]) for r in rows] == [
        (1, "assistant"),
        (1, "user"),
        (2, "assistant"),
        (2, "user"),
    ]
    assert set(rows[0]["cited_chunk_ids"]) == cited_first


def test_an_emergency_is_answered_before_any_retrieval(stack: Stack) -> None:
    with stack.http() as http:
        before = http.get("/metrics").text
        r = http.post("/v1/ask", json={"question": "My father has crushing chest pain and can't breathe"})
        after = http.get("/metrics").text
    body = r.json()
    assert r.status_code == 200 and body["mode"] == "emergency"
    assert body["sources"] == [] and "timings_ms" in body and "retrieval" not in body["timings_ms"]
    # the guard's reason reaches the client; a clinician's question on the same topic is answered
    assert body["emergency"]["situation"] and "father" in body["emergency"]["reason"]
    with stack.http() as http:
        q = "My patient took an overdose of paracetamol; when should acetylcysteine be started?"
        clinician = http.post("/v1/ask", json={"question": q}).json()
    assert clinician["mode"] != "emergency" and clinician["emergency"] is None

    def retrievals(text: str) -> float:
        total = 0.0
        for line in text.splitlines():
            if line.startswith("evidentia_request_reply_seconds_count") and "retrieval.requests" in line:
                total += float(line.rsplit(" ", 1)[1])
        return total

    assert retrievals(after) == retrievals(before)


def test_query_input_fields_and_query_intelligence(stack: Stack, corpus: dict[str, str]) -> None:
    """The medical assistant's QueryInput fields filter the search; the query-intelligence steps are reported
    (offline: rules, nothing translated)."""
    title = next(iter(corpus.values()))
    payload = {"message": f"What is known about {title}?", "source_types": ["pubmed"], "min_evidence_level": 5}
    with stack.http() as http:
        r = http.post("/v1/ask", json={**payload, "language": "en"})
        assert r.status_code == 200, r.text
        body = r.json()
        strongest = http.post("/v1/ask", json={**payload, "min_evidence_level": 1}).json()
        french = http.post("/v1/ask", json={"question": "Quels sont les effets du dépistage par mammographie ?"})
    assert body["sources"] and {s["source"] for s in body["sources"]} == {"pubmed"}
    intel = body["query_intelligence"]
    assert intel["language"]["code"] == "en" and intel["classification"]["method"] == "rules"
    assert intel["searched_query"] == body["standalone_question"] and intel["route"]
    assert body["answer_language"] == "en"
    # level 1: systematic reviews and meta-analyses only (stored weight 1.0)
    assert all((s["evidence_level"] or 0) >= 1.0 - 1e-6 for s in strongest["sources"])
    assert french.status_code == 200, french.text
    fr = french.json()["query_intelligence"]
    assert fr["language"]["code"] == "fr" and fr["enhancement"] == "untranslated" and not fr["translated"]


def test_input_rules_and_unknown_conversations(stack: Stack) -> None:
    with stack.http() as http:
        r = http.post("/v1/ask", json={"message": "x" * 10_001})
        assert r.status_code == 422 and "10000" in r.text
        r = http.post("/v1/ask", json={"question": "does it work", "filters": {"year_from": 2020, "year_to": 2000}})
        assert r.status_code == 422 and "year_from" in r.text
        r = http.post("/v1/ask", json={"question": "q"})  # the medical assistant's "Query too short"
        assert r.status_code == 422 and "too short" in r.text
        r = http.post("/v1/ask", json={"question": "does it work", "min_evidence_level": 9})
        assert r.status_code == 422 and "min_evidence_level" in r.text
        assert http.post("/v1/ask", json={"question": "does it work", "conversation_id": "none"}).status_code == 404
        assert http.get("/v1/conversations/none").status_code == 404
