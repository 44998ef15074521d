from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import numpy as np
import pytest
from pydantic import ValidationError

from services.retriever.engine.queries import render
from services.retriever.engine.ranking.mmr import mmr_select
from services.retriever.engine.ranking.rerank import LlmReranker, build_reranker, parse_llm_scores
from shared.models import THERAPEUTIC_TEMPLATE, QueryForm
from shared.settings import LlmSettings, RetrievalSettings, Settings


def test_mmr_skips_a_near_duplicate() -> None:
    vectors = np.array([[1.0, 0.0], [0.99, 0.14], [0.0, 1.0]])
    scores = [1.0, 0.95, 0.5]
    assert mmr_select(scores, vectors, 3, 1.0) == [0, 1, 2]  # relevance only
    assert mmr_select(scores, vectors, 2, 0.5) == [0, 2]  # the duplicate gives way
    assert mmr_select([], np.zeros((0, 2)), 3, 0.5) == []
    with pytest.raises(ValueError):
        mmr_select(scores, vectors, 1, 1.5)


def test_mmr_hand_computed_second_pick() -> None:
    # rel scaled: [1, .5, 0]; sim(0,1)=0.6, sim(0,2)=0 -> lambda .5: c1 = .25 - .3 = -.05, c2 = 0 - 0 = 0 -> c2
    vectors = np.array([[1.0, 0.0], [0.6, 0.8], [0.0, 1.0]])
    assert mmr_select([3.0, 2.0, 1.0], vectors, 2, 0.5) == [0, 2]
    assert mmr_select([3.0, 2.0, 1.0], vectors, 2, 0.7) == [0, 1]  # .35 - .18 = .17 > 0


def test_query_forms() -> None:
    free = render("Does metformin reduce cancer risk?")
    assert free.dense == free.lexical == "Does metformin reduce cancer risk?"
    t = render("bupropion obesity", QueryForm(kind="therapeutic", drug="bupropion", disease="obesity"))
    assert t.dense == THERAPEUTIC_TEMPLATE.format(drug="bupropion", disease="obesity")
    assert t.dense.startswith("Evidence for bupropion as a treatment for obesity, including clinical trials")
    assert t.lexical == "bupropion obesity"
    c = render(
        "x",
        QueryForm(
            kind="condition-findings",
            condition="Malaria",
            findings=["symptom: fever 3 days", "location: rural Ghana", "medical_history: pregnant first trimester"],
        ),
    )
    assert c.dense == (
        "Malaria. symptom: fever 3 days. location: rural Ghana. medical_history: pregnant first trimester."
    )
    assert c.lexical == "Malaria fever 3 days rural Ghana pregnant first trimester"
    with pytest.raises(ValidationError):
        QueryForm(kind="therapeutic", drug="x")
    with pytest.raises(ValidationError):
        QueryForm(kind="condition-findings", findings=["fever"])


def test_parse_llm_scores() -> None:
    assert parse_llm_scores('Here: [{"id": 2, "score": 9}, {"id": 1, "score": 3}]', 3) == [3.0, 9.0, -1.0]
    with pytest.raises(ValueError):
        parse_llm_scores("no idea", 2)


class _FakeMessages(BaseHTTPRequestHandler):
    replies: ClassVar[list[str]] = []
    seen: ClassVar[list[dict[str, Any]]] = []

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        type(self).seen.append({"path": self.path, "body": body, "auth": self.headers.get("authorization")})
        text = type(self).replies.pop(0)
        payload = json.dumps(
            {
                "id": "msg_1",
                "type": "message",
                "role": "assistant",
                "model": body["model"],
                "content": [{"type": "text", "text": text}],
                "stop_reason": "end_turn",
                "stop_sequence": None,
                "usage": {"input_tokens": 12, "output_tokens": 4},
            }
        ).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture()
def fake_anthropic() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _FakeMessages)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    _FakeMessages.seen.clear()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


async def test_llm_rerank_through_a_fake_messages_api(fake_anthropic: str) -> None:
    settings = Settings(
        llm=LlmSettings(ANTHROPIC_API_KEY="test-key", ANTHROPIC_BASE_URL=fake_anthropic),  # type: ignore[call-arg]
        retrieval=RetrievalSettings(rerank_llm_model="claude-haiku-4-5"),
    )
    reranker = build_reranker(settings)
    assert isinstance(reranker, LlmReranker) and reranker.name == "llm:claude-haiku-4-5"
    _FakeMessages.replies[:] = ['[{"id": 1, "score": 2}, {"id": 2, "score": 8}, {"id": 3, "score": 8}]', "garbage"]
    scores = await reranker.rerank("aspirin stroke", ["p one", "p two", "p three"])
    assert scores[1] > scores[2] > scores[0]  # tie 8/8 keeps the first-stage order
    sent = _FakeMessages.seen[0]
    assert sent["path"] == "/v1/messages" and sent["body"]["model"] == "claude-haiku-4-5"
    assert "[2] p two" in sent["body"]["messages"][0]["content"]
    fallback = await reranker.rerank("q", ["a", "b"])  # unparsable reply: first-stage order kept
    assert fallback[0] > fallback[1]


def test_build_reranker_choices() -> None:
    plain = Settings(llm=LlmSettings(ANTHROPIC_API_KEY=None))  # type: ignore[call-arg]
    assert build_reranker(plain) is None  # auto without key or cross-encoder
    with pytest.raises(ValueError):
        build_reranker(plain, "llm")
    with pytest.raises(ValueError):
        build_reranker(plain, "cross-encoder")
    ce = Settings(
        llm=LlmSettings(ANTHROPIC_API_KEY=None),  # type: ignore[call-arg]
        retrieval=RetrievalSettings(cross_encoder="/nonexistent/ce"),
    )
    r = build_reranker(ce)
    assert r is not None and r.name.startswith("cross-encoder:")


async def test_llm_rerank_calls_are_recorded_with_their_tokens(fake_anthropic: str) -> None:
    from shared.llm import usage_scope

    settings = Settings(
        llm=LlmSettings(ANTHROPIC_API_KEY="test-key", ANTHROPIC_BASE_URL=fake_anthropic),  # type: ignore[call-arg]
        retrieval=RetrievalSettings(rerank_llm_model="claude-rerank-test"),
    )
    reranker = build_reranker(settings)
    assert isinstance(reranker, LlmReranker)
    _FakeMessages.replies[:] = ['[{"id": 1, "score": 2}, {"id": 2, "score": 8}]']
    with usage_scope() as ledger:  # as the retriever's request handler opens one around a search
        await reranker.rerank("aspirin stroke", ["p one", "p two"])
    (call,) = ledger.calls
    assert (call.service, call.step, call.model) == ("retriever", "rerank", "claude-rerank-test")
    assert (call.usage.input_tokens, call.usage.output_tokens) == (12, 4)  # what the fake API reported
