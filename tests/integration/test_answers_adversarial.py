"""The adversarial Messages API stand-in through the running services and real Kafka (issue #15).

The synthesizer and gateway run in Claude mode against :meth:`FakeAnthropic.adversarial`, which fabricates,
misattributes and mis-formats citations in its text answers, its streamed deltas (cut every three characters)
and its evidence-summary tool input. Every SSE event and every JSON field a client receives, conversation history
included, must hold no id outside the retrieved sources, and every made-up id must be reported as removed.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from shared.citations import cited_ids
from shared.models import SearchHit
from tests.fakes.anthropic_server import FABRICATED, FakeAnthropic, leaks
from tests.integration.conftest import Stack, claude_mode

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture(scope="module")
def adversary(stack: Stack) -> Iterator[FakeAnthropic]:
    """The synthesizer and gateway restarted in Claude mode against the adversarial stand-in (then back)."""
    with FakeAnthropic.adversarial() as fake, claude_mode(stack, fake):
        yield fake


def _events(stack: Stack, body: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    events: list[tuple[str, dict[str, Any]]] = []
    with stack.http() as http, http.stream("POST", "/v1/ask/stream", json=body) as r:
        assert r.status_code == 200
        kind = ""
        for line in r.iter_lines():
            if line.startswith("event: "):
                kind = line.removeprefix("event: ")
            elif line.startswith("data: "):
                events.append((kind, json.loads(line.removeprefix("data: "))))
    return events


def test_no_unverified_id_reaches_the_client_in_any_channel(
    stack: Stack, sample_pmids: list[str], adversary: FakeAnthropic
) -> None:
    question = "What is known about AIDS treatment in correctional facilities?"
    # The store's sources only (``fetch: never``): what the adversary is given is what the gate allows.
    events = _events(stack, {"question": question, "return_sources": True, "fetch": "never"})
    kinds = [k for k, _ in events]
    assert kinds[0] == "retrieval_done" and kinds[-1] == "done", kinds
    allowed = {SearchHit.model_validate(s).citation_id for s in events[0][1]["sources"]}
    assert allowed and allowed <= {f"PMID:{p}" for p in sample_pmids}
    shown = ""
    for kind, data in events:  # every SSE event, every field
        if kind == "retrieval_done":
            continue  # the sources themselves (stored passages), not model output
        assert leaks(data, allowed) == [], (kind, data)
        if kind == "token":
            shown += data["text"]
            assert set(cited_ids(shown)) <= allowed
    assert any(k == "token" for k in kinds) and "summary" in kinds
    check = dict(events)["citations"]["citation_check"]
    assert set(FABRICATED) <= set(check["removed"]), check["removed"]
    assert check["verified"] and set(check["verified"]) <= allowed
    assert check["support_method"] == "llm" and check["unsupported"], "the misattributed sentence is reported"
    assert any(rq.streamed for rq in adversary.requests)

    conversation = dict(events)["done"]["conversation_id"]
    with stack.http() as http:
        r = http.post("/v1/ask", json={"question": question, "conversation_id": conversation, "return_sources": True})
        assert r.status_code == 200, r.text
        body = r.json()
        # The follow-up is rewritten by the same adversary (its citations gated away), so it may find no evidence.
        assert body["mode"] in ("llm", "insufficient-evidence")
        assert leaks(body["standalone_question"], set()) == []
        given = {SearchHit.model_validate(s).citation_id for s in body.pop("sources")}
        # Earlier turns' references stay in the reference list; nothing else may appear.
        assert leaks(body, given | allowed) == []
        if body["mode"] == "llm":
            assert set(FABRICATED) <= set(body["citation_check"]["removed"])
        history = http.get(f"/v1/conversations/{conversation}")
        assert history.status_code == 200
        assert len(history.json()["messages"]) == 4
        refs = {c["citation_id"] for c in history.json()["references"]}
        assert leaks(history.json(), refs) == []
