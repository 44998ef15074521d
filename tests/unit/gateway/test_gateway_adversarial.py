"""Every channel of the gateway against the adversarial Messages API stand-in: no unverified id in any SSE
event or JSON field, history included, and a stream that fails mid-citation sends nothing unverified."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from shared.citations import cited_ids
from shared.events import ErrorInfo, SynthesisReply, SynthesisRequest, SynthesisToken
from tests.fakes.anthropic_server import FABRICATED, FakeAnthropic, leaks
from tests.unit.gateway.conftest import HITS, build_app, client
from tests.unit.gateway.test_gateway_answers import parse_sse

ALLOWED = {h.citation_id for h in HITS}
QUESTION = "Does telephone counseling increase mammography screening?"


@pytest.fixture(scope="module")
def adversary() -> Iterator[FakeAnthropic]:
    with FakeAnthropic.adversarial() as fake:
        yield fake


async def test_no_unverified_id_in_any_event_or_field(adversary: FakeAnthropic) -> None:
    app, _, _ = build_app(fake=adversary, shuffle=True)
    async with client(app) as http:
        r = await http.post("/v1/ask/stream", json={"question": QUESTION, "return_sources": False})
        events = parse_sse(r.text)
        names = [n for n, _ in events]
        assert names[0] == "retrieval_done" and names[-1] == "done", names
        shown = ""
        for name, data in events:  # every event, every field
            assert leaks(data, ALLOWED) == [], (name, data)
            if name == "token":
                shown += data["text"]
                assert set(cited_ids(shown)) <= ALLOWED
        check = dict(events)["citations"]["citation_check"]
        assert set(FABRICATED) <= set(check["removed"])
        assert check["unsupported"], "the misattributed sentence is reported"
        conversation = dict(events)["done"]["conversation_id"]

        whole = await http.post("/v1/ask", json={"question": QUESTION, "conversation_id": conversation})
        assert whole.status_code == 200
        body = whole.json()
        assert leaks(body, ALLOWED) == []
        assert set(FABRICATED) <= set(body["citation_check"]["removed"])
        assert body["summary"] and body["summary"]["key_findings"]

        history = await http.get(f"/v1/conversations/{conversation}")
        assert history.status_code == 200 and len(history.json()["messages"]) == 4
        assert leaks(history.json(), ALLOWED) == []


async def test_a_stream_that_fails_mid_citation_sends_nothing_unverified(adversary: FakeAnthropic) -> None:
    app, kafka, _ = build_app(fake=adversary)

    async def broken(request: SynthesisRequest) -> AsyncIterator[tuple[str, bytes]]:
        pieces = ["Counseling helped [PMID:101]", ". It cures all [PMID:99", "999999] and mo"]
        for seq, text in enumerate(pieces):
            yield "SynthesisToken", SynthesisToken(seq=seq, text=text).model_dump_json().encode()
        error = SynthesisReply(error=ErrorInfo(type="APIError", message="overloaded", status=502))
        yield "SynthesisReply", error.model_dump_json().encode()

    kafka.synthesize_stream = broken  # type: ignore[method-assign]
    async with client(app) as http:
        r = await http.post("/v1/ask/stream", json={"question": QUESTION})
    events = parse_sse(r.text)
    assert [n for n, _ in events][-1] == "error"
    sent = "".join(d["text"] for n, d in events if n == "token")
    assert sent == "Counseling helped [PMID:101]. It cures all and"  # the last word ("mo") held back, then dropped
    data: list[Any] = [d for _, d in events]
    assert leaks(data, ALLOWED) == []
