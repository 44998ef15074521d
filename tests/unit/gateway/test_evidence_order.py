"""/v1/ask lists its sources strongest evidence first, and numbers its citations to match (issue #19)."""

from __future__ import annotations

import re

from tests.fakes.anthropic_server import FakeAnthropic
from tests.unit.gateway.conftest import HITS, build_app, client
from tests.unit.gateway.test_gateway_answers import QUESTION, parse_sse

# Retrieval order 101, 202, 303; evidence: an editorial, a meta-analysis, an RCT.
GRADED = [
    HITS[0].model_copy(update={"study_type": "editorial", "evidence_level": 0.3}),
    HITS[1].model_copy(update={"study_type": "meta-analysis", "evidence_level": 1.0}),
    HITS[2].model_copy(update={"study_type": "randomized-controlled-trial", "evidence_level": 0.9}),
]


def numbers_in(text: str) -> list[int]:
    return [int(n) for n in re.findall(r"\[(\d+)\]", text)]


async def test_ask_lists_sources_strongest_first_with_matching_citation_numbers(fake_anthropic: FakeAnthropic) -> None:
    fake_anthropic.requests.clear()
    app, _, _ = build_app(fake=fake_anthropic, hits=GRADED)
    async with client(app) as http:
        body = (await http.post("/v1/ask", json={"question": QUESTION})).json()
    assert [(s["pmid"], s["rank"]) for s in body["sources"]] == [("202", 2), ("303", 3), ("101", 1)]
    # The fake model cites the first two passages it was shown (101, then 202): the meta-analysis gets [1].
    assert [(c["number"], c["citation_id"]) for c in body["citations"]] == [(1, "PMID:202"), (2, "PMID:101")]
    assert body["references"] == body["citations"]
    assert numbers_in(body["numbered_answer"]) == [2, 1]
    assert body["answer"].index("[PMID:101]") < body["answer"].index("[PMID:202]")
    # The model still reads the passages in retrieval order.
    prompt = next(r for r in fake_anthropic.requests if not r.uses_tools).user_text
    assert prompt.index('id="PMID:101"') < prompt.index('id="PMID:202"') < prompt.index('id="PMID:303"')


async def test_the_stream_lists_the_same_order_and_numbers(fake_anthropic: FakeAnthropic) -> None:
    app, _, _ = build_app(fake=fake_anthropic, hits=GRADED)
    async with client(app) as http:
        events = dict(parse_sse((await http.post("/v1/ask/stream", json={"question": QUESTION})).text))
    assert [s["pmid"] for s in events["retrieval_done"]["sources"]] == ["202", "303", "101"]
    cites = events["citations"]
    assert [(c["number"], c["citation_id"]) for c in cites["citations"]] == [(1, "PMID:202"), (2, "PMID:101")]
    assert numbers_in(cites["numbered_answer"]) == [2, 1]


async def test_unclassified_sources_keep_retrieval_order_offline() -> None:
    app, _, _ = build_app()  # HITS carry no evidence weight: nothing moves
    async with client(app) as http:
        body = (await http.post("/v1/ask", json={"question": QUESTION})).json()
    assert body["mode"] == "extractive"
    assert [s["pmid"] for s in body["sources"]] == ["101", "202", "303"]
    numbers = numbers_in(body["numbered_answer"])
    assert numbers and numbers == sorted(numbers)  # equal evidence: numbered by first appearance
