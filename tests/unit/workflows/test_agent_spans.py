"""The agent's answer (Claude choosing the tools) is checked by the synthesizer as a composed one: each citation
carries the spans of its source that the answer's claims rest on, a claim no sentence supports marked so."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from services.synthesizer.core import Synthesizer
from shared.events import SynthesisRequest
from shared.settings import Settings
from tests.factories import search_hit
from tests.fakes.anthropic_server import HALLUCINATED_PMID
from tests.fakes.workflow_anthropic import WorkflowAnthropic
from tests.unit.workflows.conftest import build, client

STATIN = search_hit(
    "101",
    "Atorvastatin lowered LDL cholesterol by 40 percent compared with placebo. Adverse events were rare.",
).model_copy(update={"char_start": 200, "section": "Abstract > Results"})
LOW = search_hit("202", "Low-dose aspirin did not reduce dementia in older adults.", rank=2).model_copy(
    update={"dense_score": 0.01}
)


@pytest.fixture
def quoting_llm(fake_llm: WorkflowAnthropic) -> Iterator[WorkflowAnthropic]:
    """The module's fake Claude, its agent also quoting its first source's first sentence, for one test."""
    fake_llm.agent_quotes = True
    try:
        yield fake_llm
    finally:
        fake_llm.agent_quotes = False


async def test_agent_answer_citations_carry_spans(quoting_llm: WorkflowAnthropic) -> None:
    app, _, backend = build(quoting_llm)
    async with client(app) as http:
        r = await http.post("/v1/query", json={"question": "Does metformin help in PCOS?", "mode": "agent"})
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    assert body["agent"]["planner"] == "llm" and body["mode"] == "llm"
    # The synthesizer was asked to check the agent's answer, not to write one.
    [checked] = [s for s in backend.syntheses if s.draft is not None]
    assert not checked.summarize and {h.citation_id for h in checked.passages} == set(
        body["agent"]["steps"][0]["source_ids"]
    )
    assert f"PMID:{HALLUCINATED_PMID}" in body["citation_check"]["removed"]
    sources = {s["chunk_id"]: s for s in body["sources"]}
    answer = body["answer"]
    assert body["citations"]
    for c in body["citations"]:
        assert c["spans"] and c["created_at"] and c["text"] == c["spans"][0]["claim"]
        for span in c["spans"]:
            assert span["document_id"] == c["document_id"]
            assert span["claim"].rstrip(".") in answer[span["answer_start"] : span["answer_end"]]
            if span["supported"] is False:
                assert span["quote"] is None and span["chunk_id"] is None
            else:
                source = sources[span["chunk_id"]]
                assert source["document_id"] == c["document_id"]
                assert span["quote"] == source["text"][span["start"] : span["end"]]
    # The claim that quotes its source is tied to that very sentence; the generic claim is not supported.
    [quoted] = [s for c in body["citations"] for s in c["spans"] if s["method"] == "quote"]
    assert quoted["supported"] is True and quoted["quote"] == quoted["claim"]
    source = sources[quoted["chunk_id"]]
    assert source["text"].lstrip().startswith(quoted["claim"]) and quoted["section"] == source["section"]
    generic = [s for c in body["citations"] for s in c["spans"] if s["claim"].startswith("The retrieved evidence")]
    assert generic and all(s["supported"] is not True for s in generic)
    assert any(s["supported"] is False and s["quote"] is None for s in generic)
    assert body["citation_check"]["claims_checked"] >= 2 and body["citation_check"]["support_method"]
    # Two sources cited: the synthesizer's agreement step labelled them (the fake: all support), as in /v1/ask.
    agreement = body["agreement"]
    assert len(body["citations"]) >= 2 and agreement["status"] == "labelled"
    assert agreement["counts"]["supports"] == len(body["citations"]) and not agreement["disagree"]


async def test_a_draft_is_checked_against_every_passage_not_composed() -> None:
    # Neither passage would be composed from (both below the relevance floor); the draft cites them anyway.
    weak = STATIN.model_copy(update={"dense_score": 0.01})
    draft = (
        "Atorvastatin lowered LDL cholesterol by 40 percent compared with placebo. [PMID:101] "
        "Aspirin cures every disease [PMID:202]. A forged claim [PMID:999]."
    )
    synth = Synthesizer(Settings(support={"check": "lexical"}))  # type: ignore[arg-type]
    req = SynthesisRequest(question="Statins and LDL?", passages=[weak, LOW], draft=draft, summarize=False)
    assert not synth.relevant(req.passages)  # composing would have said the evidence is insufficient
    reply = await synth.answer(req)
    assert reply.mode == "llm" and reply.answer.startswith("Atorvastatin lowered LDL")
    assert reply.citation_check.removed == ["PMID:999"] and reply.summary is None
    spans = {c.citation_id: c.spans for c in reply.citations}
    [statin] = spans["PMID:101"]
    assert (
        statin.method == "quote" and statin.supported is True and statin.quote == weak.text[statin.start : statin.end]
    )
    assert statin.document_start == 200 + (statin.start or 0)
    [aspirin] = spans["PMID:202"]
    assert aspirin.supported is False and aspirin.quote is None and aspirin.claim == "Aspirin cures every disease."
    # Streamed, the checked draft comes whole, then the same reply.
    events = [e async for e in synth.stream(req.model_copy(update={"stream": True}))]
    assert events[0].text == reply.answer  # type: ignore[union-attr]
    assert [c.citation_id for c in events[-1].citations] == ["PMID:101", "PMID:202"]  # type: ignore[union-attr]
