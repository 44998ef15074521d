"""The gateway carries citation spans and source agreement in /v1/ask, the stream and the conversation.

The synthesizer runs in-process behind the fake Kafka (``build_app``), offline or against the fake Messages API.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tests.fakes.anthropic_server import FakeAnthropic, agreeing_labels, default_answer
from tests.integration.capture import capture
from tests.unit.gateway.conftest import HITS, build_app, client
from tests.unit.gateway.test_gateway_answers import parse_sse

QUESTION = "Does telephone counseling increase mammography screening?"
ANSWER = (
    "Telephone counseling increased mammography screening in nonadherent women [PMID:101]. "
    "Reminder letters alone did not change screening rates [PMID:303]."
)


def labels(ids: Sequence[str]) -> dict[str, Any]:
    return {
        "main_finding": "Contact by a person increases mammography screening.",
        "labels": [
            {"id": "PMID:101", "label": "supports", "reason": "Counseling increased screening."},
            {"id": "PMID:303", "label": "contradicts", "reason": "Letters did not change screening."},
            {"id": "PMID:202", "label": "mixed"},  # retrieved, not cited: dropped
            {"id": "PMID:99999999", "label": "supports"},  # made up: dropped
        ],
    }


async def test_offline_answer_quotes_its_sources_and_leaves_agreement_unlabelled() -> None:
    app, _, _ = build_app()
    async with client(app) as http:
        asked = {"question": QUESTION}
        r = await http.post("/v1/ask", json=asked)
        capture(asked, r, "ask offline: citation spans; agreement not labelled")
        body = r.json()
        view = (await http.get(f"/v1/conversations/{body['conversation_id']}")).json()
    assert body["mode"] == "extractive" and body["citations"]
    texts = {h.chunk_id: h.text for h in HITS}
    for c in body["citations"]:
        assert c["created_at"] and c["spans"]
        for s in c["spans"]:
            assert s["method"] == "quote" and texts[s["chunk_id"]][s["start"] : s["end"]] == s["quote"]
    assert body["agreement"]["status"] == "offline" and body["agreement"]["labels"] == []
    (message,) = [m for m in view["messages"] if m["role"] == "assistant"]
    assert [c["spans"] for c in message["citations"]] == [c["spans"] for c in body["citations"]]


async def test_claude_answer_reports_agreement_in_the_response_and_the_stream(fake_anthropic: FakeAnthropic) -> None:
    app, _, _ = build_app(fake=fake_anthropic)
    fake_anthropic.answer, fake_anthropic.agreement = (lambda ids: ANSWER), labels
    try:
        async with client(app) as http:
            asked = {"question": QUESTION}
            r = await http.post("/v1/ask", json=asked)
            capture(asked, r, "ask with a key: agreement labels and spans")
            body = r.json()
            streamed = await http.post("/v1/ask/stream", json=asked)
    finally:
        fake_anthropic.answer, fake_anthropic.agreement = default_answer, agreeing_labels
    agreement = body["agreement"]
    assert agreement["status"] == "labelled" and agreement["disagree"] and agreement["dropped"] == 2
    assert {a["citation_id"]: a["label"] for a in agreement["labels"]} == {
        "PMID:101": "supports",
        "PMID:303": "contradicts",
    }
    assert agreement["counts"] == {"supports": 1, "contradicts": 1, "mixed": 0, "not_addressed": 0}
    assert "the sources disagree" in body["answer"] and "[PMID:303]" in body["answer"].rsplit("Note:", 1)[1]
    spans = {c["citation_id"]: c["spans"] for c in body["citations"]}
    assert spans["PMID:101"][0]["quote"] == HITS[0].text and spans["PMID:101"][0]["supported"] is True
    events = parse_sse(streamed.text)
    named = dict(events)
    assert named["citations"]["agreement"]["counts"] == agreement["counts"]
    assert named["done"]["agreement"] == agreement["counts"]
    tokens = "".join(d["text"] for n, d in events if n == "token")
    assert tokens.strip() == named["citations"]["answer"]
