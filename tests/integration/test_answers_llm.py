"""Claude mode through the running services and real Kafka, against the fake Anthropic server."""

from __future__ import annotations

import json

import pytest

from tests.fakes.anthropic_server import HALLUCINATED_PMID, FakeAnthropic
from tests.integration.conftest import Stack

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_llm_answer_is_verified_and_hallucinations_removed(
    stack: Stack, sample_pmids: list[str], llm_mode: FakeAnthropic
) -> None:
    with stack.http() as http:
        r = http.post("/v1/ask", json={"question": "What is known about AIDS treatment in correctional facilities?"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["mode"] == "llm"
    assert body["model"]
    assert f"PMID:{HALLUCINATED_PMID}" in body["citation_check"]["removed"]
    assert HALLUCINATED_PMID not in body["answer"]
    cited = {c["citation_id"].removeprefix("PMID:") for c in body["citations"]}
    assert cited and cited <= set(sample_pmids)
    # The prompt Claude received carried the retrieved sources.
    answer_requests = [rq for rq in llm_mode.requests if not rq.uses_tools]
    assert answer_requests, "the synthesizer never called the Anthropic API"
    assert set(answer_requests[-1].source_ids) >= {f"PMID:{p}" for p in cited}


def test_llm_stream_reaches_the_client_in_order(stack: Stack, sample_pmids: list[str], llm_mode: FakeAnthropic) -> None:
    events: list[tuple[str, dict[str, object]]] = []
    with (
        stack.http() as http,
        http.stream("POST", "/v1/ask/stream", json={"question": "What is known about AIDS treatment in prisons?"}) as r,
    ):
        assert r.status_code == 200
        kind = ""
        for line in r.iter_lines():
            if line.startswith("event: "):
                kind = line.removeprefix("event: ")
            elif line.startswith("data: "):
                events.append((kind, json.loads(line.removeprefix("data: "))))
    kinds = [k for k, _ in events]
    # A PubMed search at question time (``fetch: auto``) reports its progress first, then retrieval.
    first = kinds.index("retrieval_done")
    assert set(kinds[:first]) <= {"fetch"} and "fetch" not in kinds[first:]
    assert kinds[-1] == "done"
    tokens = [d for k, d in events if k == "token"]
    assert len(tokens) > 1
    assert [t["seq"] for t in tokens] == sorted(t["seq"] for t in tokens)
    assert kinds.index("citations") > kinds.index("token")
    assert any(rq.streamed for rq in llm_mode.requests)
