"""``/v1/ask`` through the running services (issue 19): sources strongest evidence first with citation numbers to
match, the medical assistant's ``QueryInput`` fields, the too-short 422 and the routing of interaction and
guideline questions; offline first, then with the fake Messages API (``tests/fakes/workflow_anthropic.py``: the
synthesizer and the gateway restarted with ``ANTHROPIC_API_KEY``/``ANTHROPIC_BASE_URL`` for this module's later
tests, then back). With ``EVIDENTIA_CAPTURE`` set the raw requests and responses are written for
``docs/workflows.md`` (``tests/integration/capture.py``).

The corpus: three made-up inline PubMed abstracts on the same question, told apart by their publication types
(an editorial, a meta-analysis, a randomised trial); test data, not clinical evidence.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from tests.fakes.anthropic_server import HALLUCINATED_PMID
from tests.fakes.workflow_anthropic import WorkflowAnthropic
from tests.integration.capture import capture
from tests.integration.conftest import Stack, claude_mode

pytestmark = [pytest.mark.integration, pytest.mark.slow]

# pmid -> (publication type, abstract); ingested in this order, so storage order is not evidence order.
PAPERS: dict[str, tuple[str, str]] = {
    "39100001": (
        "Editorial",
        "Vitamin D supplementation is widely given to prevent hip fractures in older adults; its benefit is debated.",
    ),
    "39100002": (
        "Meta-Analysis",
        "Vitamin D supplementation with calcium reduced hip fractures in older adults in a meta-analysis of trials.",
    ),
    "39100003": (
        "Randomized Controlled Trial",
        "Vitamin D supplementation reduced hip fractures in older adults living in care homes in a randomised trial.",
    ),
}
LEVELS = {"39100001": 0.3, "39100002": 1.0, "39100003": 0.9}
QUESTION = "Does vitamin D supplementation prevent hip fractures in older adults?"
FRENCH = "La supplémentation en vitamine D prévient-elle les fractures de la hanche chez les personnes âgées ?"
INTERACTION = "Is there an interaction between warfarin and aspirin?"
GUIDELINE = "What do the guidelines recommend on vitamin D supplementation to prevent hip fractures?"


def _inline(pmid: str, kind: str, text: str) -> dict[str, Any]:
    return {
        "source": "pubmed",
        "source_id": pmid,
        "pmid": pmid,
        "title": f"Vitamin D supplementation and hip fractures in older adults ({kind}, {pmid})",
        "abstract": text,
        "year": 2021,
        "publication_types": [kind],
    }


@pytest.fixture(scope="module")
def papers(stack: Stack) -> None:
    with stack.http() as http:
        r = http.post("/v1/ingest", json={"documents": [_inline(p, k, t) for p, (k, t) in PAPERS.items()]})
        assert r.status_code == 202, r.text
        assert stack.wait_job(r.json()["job_id"])["done"]


@pytest.fixture(scope="module")
def claude(stack: Stack, papers: None) -> Iterator[WorkflowAnthropic]:
    fake = WorkflowAnthropic()
    fake.tool_answers["rewrite_query"] = {
        "english_question": QUESTION,
        "search_query": QUESTION,
        "terms": ["Vitamin D"],
    }
    with fake, claude_mode(stack, fake):
        yield fake


@contextmanager
def retriever_env(stack: Stack, **env: str) -> Iterator[None]:
    """The running retriever restarted with ``env`` added, then restarted as it was."""
    proc = stack.services.processes["retriever"]
    saved = dict(proc.env)
    proc.env = {**proc.env, **env}
    stack.services.restart("retriever")
    try:
        yield
    finally:
        proc.env = saved
        stack.services.restart("retriever")


def ask(stack: Stack, body: dict[str, Any], label: str) -> tuple[int, dict[str, Any]]:
    with stack.http() as http:
        r = http.post("/v1/ask", json=body, timeout=120)
    capture(body, r, label)
    return r.status_code, r.json()


def weight(source: dict[str, Any]) -> float:
    level = source["evidence_level"]
    return 0.5 if level is None else float(level)  # unknown counts as neutral (shared.models)


def numbered_as_listed(body: dict[str, Any]) -> None:
    """The sources are strongest evidence first; the cited ones are numbered in that order, and ``[n]`` in
    ``numbered_answer`` is the citation numbered ``n`` where ``answer`` has its id."""
    weights = [weight(s) for s in body["sources"]]
    assert weights == sorted(weights, reverse=True), weights
    ids = {c["citation_id"]: c["number"] for c in body["citations"]}
    assert ids, body["answer"]
    by_number = [c["citation_id"] for c in sorted(body["citations"], key=lambda c: c["number"])]
    listed = [f"PMID:{s['pmid']}" for s in body["sources"] if f"PMID:{s['pmid']}" in ids]
    assert by_number == listed
    in_answer = re.findall(r"\[((?:PMID|PMCID|NBK):[A-Za-z0-9]+)\]", body["answer"])
    numbers = [int(n) for n in re.findall(r"\[(\d+)\]", body["numbered_answer"])]
    assert numbers == [ids[i] for i in in_answer]


def ours(body: dict[str, Any]) -> list[str]:
    return [s["pmid"] for s in body["sources"] if s["pmid"] in PAPERS]


def test_offline_sources_strongest_evidence_first_and_citations_numbered_alike(stack: Stack, papers: None) -> None:
    status, body = ask(stack, {"question": QUESTION}, "evidence-order-offline")
    assert status == 200, body
    assert body["mode"] == "extractive"
    assert ours(body) == ["39100002", "39100003", "39100001"]  # meta-analysis, RCT, editorial
    mine = {s["pmid"]: s for s in body["sources"] if s["pmid"] in PAPERS}
    assert {p: (s["study_type"], s["evidence_level"]) for p, s in mine.items()} == {
        "39100001": ("editorial", pytest.approx(0.3)),
        "39100002": ("meta-analysis", pytest.approx(1.0)),
        "39100003": ("randomized-controlled-trial", pytest.approx(0.9)),
    }
    numbered_as_listed(body)


def test_offline_query_input_fields(stack: Stack, papers: None) -> None:
    status, body = ask(
        stack, {"message": QUESTION, "source_types": ["pubmed"], "min_evidence_level": 2}, "query-input-offline"
    )
    assert status == 200, body
    assert ours(body) == ["39100002", "39100003"]  # level 2: RCTs and stronger; the editorial is left out
    assert all(weight(s) >= 0.9 - 1e-6 and s["source"] == "pubmed" for s in body["sources"])
    status, french = ask(stack, {"message": FRENCH, "language": "fr"}, "french-offline")
    assert status == 200, french
    intel = french["query_intelligence"]
    assert intel["language"]["code"] == "fr" and intel["enhancement"] == "untranslated" and not intel["translated"]
    assert intel["searched_query"] == FRENCH and french["answer_language"] == "en"
    assert any("needs the LLM" in n for n in intel["notes"]), intel["notes"]


def test_offline_too_short_and_conflicting_fields_get_422_with_the_reason(stack: Stack) -> None:
    status, body = ask(stack, {"question": "q"}, "too-short")
    assert status == 422 and "too short" in str(body["detail"]), body
    status, body = ask(stack, {"question": QUESTION, "min_evidence_level": 9}, "level-out-of-range")
    assert status == 422 and "min_evidence_level" in str(body["detail"]), body


def test_offline_interaction_and_guideline_questions_are_routed(stack: Stack, papers: None) -> None:
    status, body = ask(stack, {"question": INTERACTION}, "interaction-offline")
    assert status == 200, body
    intel = body["query_intelligence"]
    assert intel["classification"]["category"] == "drug_interaction" and intel["classification"]["method"] == "rules"
    assert body["interaction"]["drugs"] == ["warfarin", "aspirin"] and body["interaction"]["configured"] is False
    assert body["answer"].startswith("Drug interaction check:")
    assert intel["route"][0].startswith("drug interaction: checked warfarin, aspirin")
    status, body = ask(stack, {"question": GUIDELINE}, "guideline-offline")
    assert status == 200, body
    intel = body["query_intelligence"]
    assert intel["classification"]["category"] == "guideline"
    assert intel["route"][0].startswith("guideline question: searched guideline sources first"), intel["route"]
    if "(0 relevant passages)" in intel["route"][0]:  # no guideline stored: then every source, ours among them
        assert intel["route"][1:] == ["no guideline passage: searched every source"]
        assert set(ours(body)) >= {"39100002", "39100003"}
    assert body["interaction"] is None


def test_with_claude_sources_strongest_first_and_citations_numbered_alike(
    stack: Stack, claude: WorkflowAnthropic
) -> None:
    status, body = ask(stack, {"question": QUESTION}, "evidence-order-llm")
    assert status == 200, body
    assert body["mode"] == "llm"
    assert ours(body) == ["39100002", "39100003", "39100001"]
    assert f"PMID:{HALLUCINATED_PMID}" in body["citation_check"]["removed"]
    numbered_as_listed(body)
    # The model read the passages in retrieval order and cited the first two it was shown.
    prompt = next(r for r in reversed(claude.requests) if not r.uses_tools)
    shown = prompt.source_ids[:2]
    assert {c["citation_id"] for c in body["citations"]} == set(shown)


def test_with_claude_the_question_is_translated_and_answered_in_french(stack: Stack, claude: WorkflowAnthropic) -> None:
    request = {"message": FRENCH, "source_types": ["pubmed"], "min_evidence_level": 2}
    status, body = ask(stack, request, "french-llm")
    assert status == 200, body
    intel = body["query_intelligence"]
    assert intel["translated"] and intel["enhancement"] == "translation" and intel["language"]["code"] == "fr"
    assert intel["english_question"] == intel["searched_query"] == QUESTION
    assert intel["classification"]["method"] == "llm"
    assert body["mode"] == "llm" and body["answer_language"] == "fr"
    assert ours(body) == ["39100002", "39100003"]
    steps = [(c["step"], c["model"]) for c in body["llm_calls"]]
    assert steps[:2] == [("classify", "claude-haiku-4-5"), ("enhance", "claude-haiku-4-5")], steps
    assert ("answer", "claude-test") in steps
    answer_prompt = next(r for r in reversed(claude.requests) if not r.uses_tools).user_text
    assert "Write the answer in French." in answer_prompt


def test_with_claude_the_answer_lists_by_evidence_what_retrieval_ranked_otherwise(
    stack: Stack, claude: WorkflowAnthropic
) -> None:
    """Without the evidence blend in retrieval the editorial (the most similar passage) ranks first; the answer
    still lists the meta-analysis first and numbers it [1], though the model cited the editorial first."""
    with retriever_env(stack, EVIDENTIA_RETRIEVAL_EVIDENCE_WEIGHT="0"):
        status, body = ask(stack, {"question": QUESTION}, "evidence-reorder-llm")
    assert status == 200, body
    rank = {s["pmid"]: s["rank"] for s in body["sources"]}
    assert rank["39100001"] < rank["39100002"]  # retrieval: the editorial above the meta-analysis
    assert ours(body) == ["39100002", "39100003", "39100001"]  # listed: meta-analysis, RCT, editorial
    numbered_as_listed(body)
    prompt = next(r for r in reversed(claude.requests) if not r.uses_tools)
    assert prompt.source_ids.index("PMID:39100001") < prompt.source_ids.index("PMID:39100002")  # retrieval order
    number = {c["citation_id"]: c["number"] for c in body["citations"]}
    if {"PMID:39100001", "PMID:39100002"} <= set(number):
        assert number["PMID:39100002"] < number["PMID:39100001"]
        assert body["answer"].index("[PMID:39100001]") < body["answer"].index("[PMID:39100002]")
