"""The workflow answers report every Claude call they made (``llm_calls``) and the tokens added up (``tokens_used``).

The small steps (normalisation, expansion, classification, enhancement, the support check) run on the fast model
(``EVIDENTIA_LLM_FAST_MODEL``); answer writing (the answer, the evidence summary, the guideline assessment, the
agent) on the main model. The fake Messages API reports usage as the real API does.
"""

from __future__ import annotations

from typing import Any

from shared.events import TokenUsage
from shared.settings import LlmSettings
from tests.fakes.rxnav_server import FakeRxNav
from tests.fakes.workflow_anthropic import WorkflowAnthropic
from tests.unit.workflows.conftest import build, client

FIELDS = list(TokenUsage.model_fields)
FAST = LlmSettings().fast_model
MAIN = "claude-test"  # the tests' EVIDENTIA_LLM_MODEL


def sent_total(fake: WorkflowAnthropic) -> dict[str, int]:
    return {k: sum(int(u[k]) for _, u in fake.usages) for k in FIELDS}


def models(body: dict[str, Any]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for c in body["llm_calls"]:
        out.setdefault(c["step"], set()).add(c["model"])
    return out


async def test_query_reports_the_fast_steps_and_the_answer(fake_llm: WorkflowAnthropic) -> None:
    app, _, _ = build(fake_llm)
    fake_llm.usages.clear()
    async with client(app) as http:
        body = (
            await http.post(
                "/v1/query", json={"question": "Quel est le traitement du paludisme chez la femme enceinte ?"}
            )
        ).json()
    assert body["mode"] == "llm"
    steps = models(body)
    assert steps["classify"] == steps["enhance"] == steps["support_check"] == {FAST}
    assert steps["answer"] == steps["summary"] == {MAIN}
    services = {c["step"]: c["service"] for c in body["llm_calls"]}
    assert services["classify"] == "synthesizer" and services["answer"] == "synthesizer"  # every LLM step
    # Every call the API answered for this question is in the answer, and the total is theirs.
    assert len(body["llm_calls"]) == len(fake_llm.usages)
    assert body["tokens_used"] == sent_total(fake_llm)
    assert body["tokens_used"]["input_tokens"] > 0 and body["tokens_used"]["output_tokens"] > 0


async def test_evidence_reports_normalisation_and_expansion_on_the_fast_model(fake_llm: WorkflowAnthropic) -> None:
    app, _, _ = build(fake_llm, counts={'metformin AND "polycystic ovary syndrome"': 4})
    fake_llm.usages.clear()
    async with client(app) as http:
        r = await http.post("/v1/evidence", json={"drug": "metformin", "disease": "polycystic ovary syndrome"})
    body = r.json()
    steps = models(body)
    assert steps["normalise"] == steps["expand"] == {FAST}
    assert steps["summary"] == {MAIN}
    assert len(body["llm_calls"]) == len(fake_llm.usages) and body["tokens_used"] == sent_total(fake_llm)


async def test_the_guideline_assessment_is_written_on_the_main_model(fake_llm: WorkflowAnthropic) -> None:
    app, _, _ = build(fake_llm)
    fake_llm.usages.clear()
    async with client(app) as http:
        body = (
            await http.post(
                "/v1/guidelines/recommend",
                json={"condition": "Malaria", "findings": [{"kind": "medical_history", "value": "pregnant"}]},
            )
        ).json()
    assert models(body)["assessment"] == {MAIN} == {body["assessment_model"]}
    assert body["tokens_used"] == sent_total(fake_llm)


async def test_every_agent_turn_is_reported(fake_llm: WorkflowAnthropic) -> None:
    with FakeRxNav() as rx:
        app, _, _ = build(fake_llm, rxnav_url=rx.url)
        fake_llm.usages.clear()
        async with client(app) as http:
            body = (
                await http.post("/v1/query", json={"question": "Does warfarin interact with aspirin?", "mode": "agent"})
            ).json()
    agent_calls = [c for c in body["llm_calls"] if c["step"] == "agent"]
    # One model call per turn: each tool round, then the answer.
    assert len(agent_calls) == len({s["step"] for s in body["agent"]["steps"]}) + 1
    assert {c["model"] for c in agent_calls} == {MAIN}
    assert body["tokens_used"] == sent_total(fake_llm)


async def test_offline_workflows_make_no_call() -> None:
    app, _, _ = build()
    async with client(app) as http:
        body = (await http.post("/v1/evidence", json={"drug": "metformin", "disease": "pcos"})).json()
        query = (await http.post("/v1/query", json={"question": "Does metformin help in PCOS?"})).json()
    for b in (body, query):
        assert b["mode"] != "llm" and b["llm_calls"] == [] and b["tokens_used"] == dict.fromkeys(FIELDS, 0)
