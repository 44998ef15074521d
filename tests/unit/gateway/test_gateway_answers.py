"""/v1/ask, /v1/ask/stream and conversations through the gateway app; the synthesizer behind a fake Kafka."""

from __future__ import annotations

import json
from typing import Any

from services.synthesizer.core import Synthesizer
from shared.citations import scrub
from shared.events import SynthesisRequest
from shared.safety import EMERGENCY_ANSWER
from shared.settings import Settings
from tests.fakes.anthropic_server import HALLUCINATED_PMID, FakeAnthropic
from tests.unit.gateway.conftest import build_app, client

QUESTION = "Does telephone counseling increase mammography screening?"


def parse_sse(text: str) -> list[tuple[str, dict[str, Any]]]:
    events = []
    for frame in text.split("\n\n"):
        if not frame.strip():
            continue
        name, data = "message", ""
        for line in frame.splitlines():
            if line.startswith("event:"):
                name = line[6:].strip()
            elif line.startswith("data:"):
                data += line[5:].strip()
        events.append((name, json.loads(data) if data else {}))
    return events


async def test_ask_in_llm_mode_returns_a_verified_numbered_answer(fake_anthropic: FakeAnthropic) -> None:
    fake_anthropic.requests.clear()
    app, kafka, _ = build_app(fake=fake_anthropic)
    async with client(app) as http:
        r = await http.post("/v1/ask", json={"message": QUESTION, "filters": {"year_from": 1990}})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["mode"] == "llm" and body["model"] == "claude-test"
    assert body["turn"] == 1 and body["conversation_id"]
    assert [(c["number"], c["citation_id"]) for c in body["citations"]] == [(1, "PMID:101"), (2, "PMID:202")]
    assert body["references"] == body["citations"]
    assert HALLUCINATED_PMID not in body["answer"]
    assert f"PMID:{HALLUCINATED_PMID}" in body["citation_check"]["removed"]
    assert "[1]" in body["numbered_answer"] and "PMID" not in body["numbered_answer"]
    assert body["summary"]["strength"] == "moderate" and body["summary"]["method"] == "llm"
    assert body["disclaimer"] and len(body["sources"]) == 3
    assert kafka.retrievals[0].filters.year_from == 1990
    prompt = next(r for r in fake_anthropic.requests if not r.uses_tools).user_text
    assert '<source n="1" id="PMID:101">' in prompt and "<title>Study 101 of screening</title>" in prompt


async def test_stream_relays_every_token_in_order_and_the_events_in_sequence(
    fake_anthropic: FakeAnthropic,
) -> None:
    app, _, _ = build_app(fake=fake_anthropic, shuffle=True)  # tokens reach the gateway out of order
    async with client(app) as http:
        r = await http.post("/v1/ask/stream", json={"question": QUESTION})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    events = parse_sse(r.text)
    names = [n for n, _ in events]
    tokens = [d for n, d in events if n == "token"]
    assert names == ["retrieval_done", *(["token"] * len(tokens)), "citations", "summary", "metrics", "done"]
    assert [t["seq"] for t in tokens] == list(range(len(tokens)))
    # Every token in order; the made-up citation was taken out as the answer streamed.
    raw = fake_anthropic.answer(["PMID:101", "PMID:202", "PMID:303"])
    assert "".join(t["text"] for t in tokens) == scrub(raw, {"PMID:101", "PMID:202", "PMID:303"})[0]
    assert all(HALLUCINATED_PMID not in t["text"] for t in tokens)
    retrieval = events[0][1]
    assert [s["pmid"] for s in retrieval["sources"]] == ["101", "202", "303"]
    cites = dict(events)["citations"]
    assert cites["mode"] == "llm" and HALLUCINATED_PMID not in cites["answer"]
    assert dict(events)["metrics"]["time_to_first_token_ms"] > 0
    assert dict(events)["done"]["conversation_id"] == retrieval["conversation_id"]


async def test_offline_mode_gives_the_same_response_shape(fake_anthropic: FakeAnthropic) -> None:
    llm_app, _, _ = build_app(fake=fake_anthropic)
    off_app, _, _ = build_app()
    async with client(llm_app) as a, client(off_app) as b:
        llm = (await a.post("/v1/ask", json={"question": QUESTION})).json()
        off = (await b.post("/v1/ask", json={"question": QUESTION})).json()
        off_stream = parse_sse((await b.post("/v1/ask/stream", json={"question": QUESTION})).text)
    assert off["mode"] == "extractive" and llm["mode"] == "llm"
    assert set(off) == set(llm)
    assert set(off["summary"]) == set(llm["summary"]) and off["summary"]["method"] == "extractive"
    assert off["citations"] and "[PMID:101]" in off["answer"]
    names = [n for n, _ in off_stream]
    assert names[0] == "retrieval_done" and names[-4:] == ["citations", "summary", "metrics", "done"]


async def test_a_conversation_keeps_numbers_rewrites_follow_ups_and_reoffers_cited_chunks(
    fake_anthropic: FakeAnthropic,
) -> None:
    app, kafka, _ = build_app(fake=fake_anthropic)
    async with client(app) as http:
        first = (await http.post("/v1/ask", json={"question": QUESTION})).json()
        cid = first["conversation_id"]
        # Turn 2 retrieves other passages, one of them already cited: its number must not change.
        from tests.unit.gateway.conftest import HITS

        kafka.hits = [HITS[2], HITS[1]]
        r = await http.post(
            "/v1/ask", json={"question": "What about their effect in older women?", "conversation_id": cid}
        )
        assert r.status_code == 200, r.text
        second = r.json()
        view = (await http.get(f"/v1/conversations/{cid}")).json()
    assert second["turn"] == 2 and second["conversation_id"] == cid
    # The rule (no key for the rewriter here): the follow-up carries the previous question.
    assert second["standalone_question"].startswith("What about their effect in older women")
    assert "mammography screening" in second["standalone_question"]
    assert kafka.retrievals[1].query == second["standalone_question"]
    assert set(kafka.retrievals[1].extra_chunk_ids) == {"pubmed:101#h#0", "pubmed:202#h#0"}
    numbers = {c["citation_id"]: c["number"] for c in second["citations"]}
    assert numbers == {"PMID:303": 3, "PMID:202": 2}
    assert [c["number"] for c in second["references"]] == [1, 2, 3]
    # The model saw the first turn.
    assert [t.role for t in kafka.syntheses[1].history] == ["user", "assistant"]
    assert kafka.syntheses[1].citation_numbers == {"PMID:101": 1, "PMID:202": 2}
    assert [m["role"] for m in view["messages"]] == ["user", "assistant", "user", "assistant"]
    assert [c["number"] for c in view["references"]] == [1, 2, 3]


async def test_claude_rewrites_follow_ups_when_a_key_is_set(fake_anthropic: FakeAnthropic) -> None:
    app, _, _ = build_app(fake=fake_anthropic, claude_rewrites=True)
    async with client(app) as http:
        cid = (await http.post("/v1/ask", json={"question": QUESTION})).json()["conversation_id"]
        fake_anthropic.requests.clear()
        fake_anthropic.reply_text("Does telephone counseling increase mammography screening in older women?")
        second = (await http.post("/v1/ask", json={"question": "And in older women?", "conversation_id": cid})).json()
    assert second["standalone_question"] == "Does telephone counseling increase mammography screening in older women?"
    rewrite = fake_anthropic.requests[0]
    assert "Last question: And in older women?" in rewrite.user_text and QUESTION in rewrite.user_text


async def test_an_emergency_is_answered_without_retrieval_or_model(fake_anthropic: FakeAnthropic) -> None:
    fake_anthropic.requests.clear()
    app, kafka, _ = build_app(fake=fake_anthropic)
    async with client(app) as http:
        whole = (await http.post("/v1/ask", json={"question": "My husband has crushing chest pain right now"})).json()
        streamed = parse_sse((await http.post("/v1/ask/stream", json={"question": "I took an overdose"})).text)
    assert whole["mode"] == "emergency" and "emergency" in whole["answer"].lower()
    assert whole["sources"] == [] and whole["citations"] == []
    assert [n for n, _ in streamed] == ["retrieval_done", "token", "citations", "metrics", "done"]
    assert streamed[0][1]["skipped"] == "emergency"
    assert kafka.retrievals == [] and kafka.syntheses == [] and fake_anthropic.requests == []
    # the guard's reason is in the response, in both channels
    assert whole["emergency"]["situation"] == "chest pain" and "husband" in whole["emergency"]["reason"]
    assert whole["emergency"]["person"] == "someone with the writer"
    citations = dict(streamed)["citations"]
    assert citations["emergency"]["situation"] == "an overdose or a poison swallowed"
    assert streamed[0][1]["emergency_reason"] == citations["emergency"]["reason"]
    # the one emergency reply (shared.safety.emergency_reply): what the synthesizer answers to the same message
    message = "My husband has crushing chest pain right now"
    synth = await Synthesizer(Settings()).answer(SynthesisRequest(question=message))
    assert synth.emergency is not None
    assert whole["answer"] == whole["numbered_answer"] == synth.answer == EMERGENCY_ANSWER
    assert whole["emergency"] == synth.emergency.model_dump(mode="json") and whole["disclaimer"] == synth.disclaimer


async def test_input_rules_give_422_with_the_reason() -> None:
    app, _, _ = build_app()
    async with client(app) as http:
        cases = {
            "empty": {"question": ""},
            "blank": {"question": "   "},
            "long": {"question": "x" * 10_001},
            "years": {"question": "q about things", "filters": {"year_from": 2020, "year_to": 2010}},
            "unknown field": {"question": "q about things", "temperature": 2},
            "bad conversation id": {"question": "q about things", "conversation_id": "../etc"},
            "bad study type": {"question": "q about things", "filters": {"study_types": ["horoscope"]}},
        }
        for name, payload in cases.items():
            r = await http.post("/v1/ask", json=payload)
            assert r.status_code == 422, (name, r.text)
            assert r.json()["detail"], name
        r = await http.post("/v1/ask", json={"question": "x" * 10_001})
        assert "10000" in r.text or "10,000" in r.text
        r = await http.post(
            "/v1/ask", json={"question": "does it work", "filters": {"year_from": 2020, "year_to": 2010}}
        )
        assert "year_from" in r.text
        r = await http.post("/v1/ask", json={"question": "does it work", "conversation_id": "nope"})
        assert r.status_code == 404
        r = await http.post("/v1/ask/stream", json={"question": "does it work", "conversation_id": "nope"})
        assert r.status_code == 404
        r = await http.get("/v1/conversations/nope")
        assert r.status_code == 404


async def test_a_synthesizer_error_becomes_an_sse_error_event(fake_anthropic: FakeAnthropic) -> None:
    app, _, _ = build_app(fake=fake_anthropic)
    fake_anthropic.fail_next(500)
    fake_anthropic.fail_next(500)
    async with client(app) as http:
        r = await http.post("/v1/ask/stream", json={"question": QUESTION})
    events = parse_sse(r.text)
    assert [n for n, _ in events] == ["retrieval_done", "error"]
    assert events[-1][1]["status"] == 502
    fake_anthropic.fail_next(500)
    fake_anthropic.fail_next(500)
    async with client(app) as http:
        r = await http.post("/v1/ask", json={"question": QUESTION})
    assert r.status_code == 502 and r.json()["type"] == "InternalServerError"


async def test_the_web_page_is_served_at_the_root() -> None:
    app, _, _ = build_app()
    async with client(app) as http:
        r = await http.get("/")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    for needle in (
        'id="question"',
        'id="year-from"',
        'id="study-type"',
        'id="evidence-level"',
        'id="answer"',
        'id="summary"',
        'id="ingest-form"',
        "/v1/ask/stream",
        "/v1/ingest",
        "a.cite",
    ):
        assert needle in r.text, needle
    assert "frame-ancestors 'none'" in r.headers["content-security-policy"]
