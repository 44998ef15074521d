"""``POST /v1/guidelines/consult`` through the gateway's HTTP routes: Kafka replaced by the fake backend (its
``retrievals`` are what would be published to the retriever) and the synthesizer's steps run in-process
against the fake Anthropic server; offline, the documented rules."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from services.gateway.intelligence.consult import rule_findings, rule_questions
from tests.fakes.workflow_anthropic import WorkflowAnthropic
from tests.unit.workflows.conftest import build, client

DIAGNOSABLE = [
    {"role": "assistant", "content": "What brings you in today?"},
    {"role": "user", "content": "I have had a fever for 3 days since I came back from Mozambique."},
    {"role": "assistant", "content": "Are you pregnant? Are you allergic to any medicine?"},
    {"role": "user", "content": "Yes, I am pregnant, first trimester. I am 28 years old. No allergies."},
]
UNCLEAR = [{"role": "user", "content": "I have a fever."}]


@pytest.fixture
def fake() -> Iterator[WorkflowAnthropic]:
    with WorkflowAnthropic() as f:
        yield f


async def consult(app: Any, body: dict[str, Any]) -> Any:
    async with client(app) as http:
        return await http.post("/v1/guidelines/consult", json=body)


async def test_with_claude_the_findings_and_diagnosis_are_extracted_then_the_recommendation_runs(
    fake: WorkflowAnthropic,
) -> None:
    app, _, backend = build(fake)
    r = await consult(app, {"messages": DIAGNOSABLE, "population": "adult"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["status"] == "recommended" and body["extraction"] == "llm"
    assert (body["diagnosis"], body["diagnosis_source"], body["confidence"]) == ("Malaria", "llm", 0.85)
    assert {(f["type"], f["source"]) for f in body["findings"]} == {
        ("symptom", "llm"),
        ("pregnancy", "llm"),
        ("history", "llm"),
    }
    # the recommend flow ran on the diagnosis and the findings: guideline sections only, pregnancy on top
    [retrieval] = backend.retrievals
    form = retrieval.query_form
    assert form is not None and form.condition == "Malaria" and retrieval.filters.sources == ["bookshelf"]
    assert "pregnancy: pregnant, first trimester" in form.findings
    assert "medical_history: travel to Mozambique" in form.findings  # history: the recommend flow's kind
    rec = body["recommendation"]
    assert "Malaria in pregnancy" in rec["top_section"] and rec["assessment_mode"] == "llm"
    # what it cost: the extraction (fast model) with the recommendation's calls
    steps = [c["step"] for c in body["llm_calls"]]
    assert "extract_findings" in steps and "assessment" in steps
    [extract] = [c for c in body["llm_calls"] if c["step"] == "extract_findings"]
    assert extract["model"] == "claude-haiku-4-5" and body["tokens_used"]["input_tokens"] > 0


async def test_with_claude_and_no_diagnosis_yet_nothing_is_retrieved_and_the_missing_findings_are_asked(
    fake: WorkflowAnthropic,
) -> None:
    app, _, backend = build(fake)
    body = (await consult(app, {"messages": UNCLEAR})).json()
    assert body["status"] == "needs_findings" and body["recommendation"] is None
    assert body["diagnosis"] is None and body["diagnosis_source"] is None
    assert body["missing"] == [
        "Have you travelled recently, and where to?",
        "Has a malaria blood smear or rapid test been done?",
    ]
    assert backend.retrievals == [] and backend.syntheses == []  # nothing was published to the retriever


async def test_a_low_confidence_diagnosis_is_reported_but_not_acted_on(fake: WorkflowAnthropic) -> None:
    fake.tool_answers["record_findings"] = {
        "findings": [{"type": "symptom", "text": "fever", "value": None}],
        "diagnosis": "Malaria",
        "confidence": 0.4,
        "missing": [],
    }
    app, _, backend = build(fake)
    body = (await consult(app, {"messages": UNCLEAR})).json()
    assert body["status"] == "needs_findings" and backend.retrievals == []
    assert (body["diagnosis"], body["confidence"], body["diagnosis_source"]) == ("Malaria", 0.4, None)
    assert body["missing"] == ["What findings would confirm or rule out Malaria?"]
    # the same answer at a lower threshold is acted on
    body = (await consult(app, {"messages": UNCLEAR, "min_confidence": 0.3})).json()
    assert body["status"] == "recommended" and body["diagnosis_source"] == "llm" and len(backend.retrievals) == 1


async def test_the_callers_diagnosis_wins_over_the_models(fake: WorkflowAnthropic) -> None:
    app, _, backend = build(fake)
    body = (await consult(app, {"messages": DIAGNOSABLE, "diagnosis": "Typhoid fever"})).json()
    assert body["status"] == "recommended" and body["extraction"] == "llm"
    assert (body["diagnosis"], body["diagnosis_source"], body["confidence"]) == ("Typhoid fever", "caller", None)
    assert backend.retrievals[0].query_form is not None
    assert backend.retrievals[0].query_form.condition == "Typhoid fever"
    assert any("Malaria" in n for n in body["notes"])


async def test_a_malformed_extraction_falls_back_to_the_rules(fake: WorkflowAnthropic) -> None:
    fake.tool_answers["record_findings"] = {"findings": [{"type": "lab", "text": "x"}], "diagnosis": None}
    app, _, backend = build(fake)
    body = (await consult(app, {"messages": DIAGNOSABLE})).json()
    assert body["extraction"] == "rules" and body["status"] == "needs_findings" and body["recommendation"] is None
    assert body["findings"] and all(f["source"] == "rules" for f in body["findings"])
    assert any("extraction failed" in n for n in body["notes"])
    # the differentials still come from the rules' findings: the likely one is planned, nothing else retrieved
    assert [(d["diagnosis"], d["planned"]) for d in body["differentials"]] == [
        ("Malaria", True),
        ("Typhoid fever", False),
    ]
    assert [r.query_form.condition for r in backend.retrievals if r.query_form] == ["Malaria"]


async def test_offline_the_callers_diagnosis_and_the_rules_findings_give_the_recommendation() -> None:
    app, _, backend = build()
    r = await consult(app, {"messages": DIAGNOSABLE, "diagnosis": "Malaria"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["status"] == "recommended" and body["extraction"] == "rules"
    assert body["diagnosis_source"] == "caller" and body["llm_calls"] == []
    assert [(f["type"], f["text"], f["source"]) for f in body["findings"]] == [
        ("age", "28 years old", "rules"),
        ("pregnancy", "pregnant, first trimester", "rules"),
        ("history", "travel to Mozambique", "rules"),
        ("symptom", "fever for 3 days", "rules"),
    ]  # the interviewer's questions (pregnant? allergic?) and the denied allergy are not findings
    assert body["recommendation"]["assessment_mode"] == "template"
    assert "Malaria in pregnancy" in body["recommendation"]["top_section"]
    assert body["missing"] == rule_questions(rule_findings(DIAGNOSABLE))
    assert len(backend.retrievals) == 1


async def test_offline_without_a_diagnosis_is_422_with_the_reason_and_retrieves_nothing() -> None:
    app, _, backend = build()
    r = await consult(app, {"messages": DIAGNOSABLE})
    assert r.status_code == 422 and "give `diagnosis`" in r.json()["detail"]
    assert backend.retrievals == []


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ({"messages": []}, "messages"),
        ({"messages": [{"role": "system", "content": "x"}]}, "role"),
        ({"messages": [{"role": "user", "content": ""}]}, "content"),
        ({"messages": [{"role": "user", "content": "   "}], "diagnosis": "Malaria"}, "blank"),
        ({"messages": [{"role": "user", "content": "x" * 5001}]}, "content"),
        ({"messages": [{"role": "user", "content": "x" * 4000}] * 13, "diagnosis": "Malaria"}, "longer than"),
        ({"messages": [{"role": "user", "content": "fever"}] * 101}, "messages"),
        ({"messages": [{"role": "user", "content": "fever"}], "diagnosis": " "}, "diagnosis"),
        ({"messages": [{"role": "user", "content": "fever"}], "min_confidence": 2}, "min_confidence"),
        ({"messages": [{"role": "user", "content": "fever"}], "extra": 1}, "extra"),
    ],
)
async def test_a_bad_consultation_is_422_with_the_reason(body: dict[str, Any], reason: str) -> None:
    app, _, backend = build()
    r = await consult(app, body)
    assert r.status_code == 422 and reason in r.text, r.text
    assert backend.retrievals == []


def test_the_rules_read_the_patient_only_and_skip_negations() -> None:
    messages = [
        {"role": "assistant", "content": "Are you allergic to penicillin? Do you have a cough?"},
        {
            "role": "user",
            "content": "I'm a 34-year-old man. No cough. Temperature 39.2, BP 100/60, pulse 118, SpO2 93%. "
            "I am allergic to sulfonamides and penicillin. I'm taking metformin, lisinopril and aspirin. "
            "I have a history of type 2 diabetes. I have had a headache for two days. The nurse saw jaundice. "
            "I am not pregnant.",
        },
    ]
    found = [(f.type, f.text, f.value) for f in rule_findings(messages)]
    assert found == [
        ("age", "34 years old", "34"),
        ("vital", "temperature 39.2 C", "39.2 C"),
        ("vital", "blood pressure 100/60 mmHg", "100/60 mmHg"),
        ("vital", "heart rate 118/min", "118/min"),
        ("vital", "oxygen saturation 93%", "93%"),
        ("allergy", "allergic to sulfonamides", "sulfonamides"),
        ("allergy", "allergic to penicillin", "penicillin"),
        ("medication", "metformin", None),
        ("medication", "lisinopril", None),
        ("medication", "aspirin", None),
        ("history", "type 2 diabetes", None),
        ("symptom", "headache for two days", "two days"),
        ("sign", "jaundice", None),
    ]
    assert all(f.source == "rules" for f in rule_findings(messages))
    assert rule_questions(rule_findings(messages)) == ["Is the patient pregnant (and if so, which trimester)?"]


# A consultation continued over turns (consultation_id): the state is kept in the consultation store.

TURN_1 = [{"role": "user", "content": "I have had a fever for 3 days."}]
TURN_2 = [
    {"role": "assistant", "content": "Have you travelled recently?"},
    {"role": "user", "content": "Yes, I came back from Mozambique. I am pregnant, first trimester."},
]


async def test_with_claude_a_second_turn_continues_the_consultation_and_the_findings_accumulate(
    fake: WorkflowAnthropic,
) -> None:
    app, _, backend = build(fake)
    first = (await consult(app, {"messages": TURN_1})).json()
    assert first["turn"] == 1 and first["status"] == "needs_findings" and backend.retrievals == []
    assert [(d["diagnosis"], d["confidence"], d["planned"]) for d in first["differentials"]] == [
        ("Malaria", 0.25, False),  # below the plan threshold (0.3): no plan, nothing retrieved
        ("Influenza", 0.2, False),
    ]
    assert first["differentials"][0]["separating_findings"] == ["Have you travelled recently, and where to?"]
    assert first["plan_min_confidence"] == 0.3

    second = (await consult(app, {"messages": TURN_2, "consultation_id": first["consultation_id"]})).json()
    assert second["consultation_id"] == first["consultation_id"] and second["turn"] == 2
    assert [(f["type"], f["text"], f["turn"]) for f in second["findings"]] == [
        ("symptom", "fever for 3 days", 1),  # from turn 1, kept
        ("pregnancy", "pregnant, first trimester", 2),
        ("history", "travel to Mozambique", 2),
    ]
    # the extraction read the whole interview, the differentials all the findings so far
    extracts = [r for r in fake.requests if (r.body.get("tool_choice") or {}).get("name") == "record_findings"]
    assert "I have had a fever for 3 days." in extracts[-1].user_text and "Mozambique" in extracts[-1].user_text
    malaria, typhoid = second["differentials"]
    assert (malaria["diagnosis"], malaria["rank"], malaria["source"], malaria["planned"]) == ("Malaria", 1, "llm", True)
    assert malaria["supporting_findings"] == ["fever for 3 days", "travel to Mozambique"]
    assert (typhoid["diagnosis"], typhoid["planned"], typhoid["recommendation"]) == ("Typhoid fever", False, None)
    # Malaria is also the working diagnosis: one plan serves both, citing guideline section title paths
    assert second["status"] == "recommended" and second["diagnosis"] == "Malaria"
    assert malaria["recommendation"] == second["recommendation"]
    assert [r.query_form.condition for r in backend.retrievals if r.query_form] == ["Malaria"]
    plan = malaria["recommendation"]["plan"]
    assert plan and all(p["sections"] and all(" > " in s for s in p["sections"]) for p in plan)


async def test_each_differential_at_the_threshold_gets_its_own_plan(fake: WorkflowAnthropic) -> None:
    fake.tool_answers["record_differentials"] = lambda rec: {
        "differentials": [
            {"diagnosis": d, "confidence": c, "supporting_finding_ids": ["F1"], "separating_findings": []}
            for d, c in (("Typhoid fever", 0.3), ("Malaria", 0.6), ("Dengue", 0.29))
        ]
    }
    app, _, backend = build(fake)
    body = (await consult(app, {"messages": DIAGNOSABLE})).json()
    assert [(d["diagnosis"], d["planned"]) for d in body["differentials"]] == [
        ("Malaria", True),
        ("Typhoid fever", True),  # at the threshold
        ("Dengue", False),
    ]
    conditions = sorted(r.query_form.condition for r in backend.retrievals if r.query_form)
    assert conditions == ["Malaria", "Typhoid fever"]  # one retrieval each; the working diagnosis shares Malaria's
    typhoid = body["differentials"][1]["recommendation"]
    assert typhoid["condition"] == "Typhoid fever" and typhoid["query"].startswith("Typhoid fever.")


async def test_a_malformed_differential_is_refused_and_only_the_callers_are_listed(fake: WorkflowAnthropic) -> None:
    fake.tool_answers["record_differentials"] = {
        "differentials": [
            {"diagnosis": "Malaria", "confidence": 1.4, "supporting_finding_ids": ["F1"], "separating_findings": []}
        ]
    }
    app, _, _ = build(fake)
    body = (await consult(app, {"messages": DIAGNOSABLE, "diagnosis": "Typhoid fever"})).json()
    assert [(d["diagnosis"], d["source"], d["confidence"]) for d in body["differentials"]] == [
        ("Typhoid fever", "caller", None)
    ]
    assert any("differential step failed" in n for n in body["notes"])


async def test_offline_the_callers_diagnoses_are_the_differentials_and_are_kept_for_later_turns() -> None:
    app, _, backend = build()
    first = (await consult(app, {"messages": TURN_1, "diagnosis": "Malaria"})).json()
    assert [(d["diagnosis"], d["source"], d["confidence"], d["planned"]) for d in first["differentials"]] == [
        ("Malaria", "caller", None, True)
    ]
    assert any("offline" in n and "no differential" in n for n in first["notes"])
    assert first["differentials"][0]["recommendation"] == first["recommendation"]
    # the next turn gives no diagnosis: the stored one is used; a second one is added and planned too
    second = (await consult(app, {"messages": TURN_2, "consultation_id": first["consultation_id"]})).json()
    assert (second["status"], second["diagnosis"], second["diagnosis_source"]) == ("recommended", "Malaria", "caller")
    assert {(f["text"], f["turn"]) for f in second["findings"]} >= {
        ("fever for 3 days", 1),
        ("travel to Mozambique", 2),
    }
    assert "Malaria in pregnancy" in second["recommendation"]["top_section"]  # the later findings reach the search
    third = (
        await consult(
            app,
            {
                "messages": [{"role": "user", "content": "No rash."}],
                "consultation_id": first["consultation_id"],
                "diagnosis": "Typhoid fever",
            },
        )
    ).json()
    assert [(d["diagnosis"], d["planned"]) for d in third["differentials"]] == [
        ("Malaria", True),
        ("Typhoid fever", True),
    ]
    assert third["diagnosis"] == "Typhoid fever" and third["turn"] == 3
    assert third["llm_calls"] == [] and len(backend.retrievals) == 4  # 1 + 1 + 2 plans


async def test_an_unknown_consultation_is_404_with_the_reason_and_stores_nothing() -> None:
    app, _, backend = build()
    r = await consult(app, {"messages": TURN_1, "diagnosis": "Malaria", "consultation_id": "0" * 32})
    assert r.status_code == 404 and "no consultation" in r.json()["detail"] and backend.retrievals == []
    r = await consult(app, {"messages": TURN_1, "diagnosis": "Malaria", "consultation_id": "../x"})
    assert r.status_code == 422 and "consultation_id" in r.text


async def test_a_key_continues_only_its_own_consultations() -> None:
    from services.gateway.security import key_digest
    from shared.settings import GatewaySettings

    gateway = GatewaySettings(api_key_hashes=f"{key_digest('alice-key')}, {key_digest('bob-key')}")  # type: ignore[call-arg]
    app, _, _ = build(gateway=gateway)
    body = {"messages": TURN_1, "diagnosis": "Malaria"}
    async with client(app, "alice-key") as alice, client(app, "bob-key") as bob:
        started = (await alice.post("/v1/guidelines/consult", json=body)).json()
        again = {**body, "consultation_id": started["consultation_id"]}
        assert (await bob.post("/v1/guidelines/consult", json=again)).status_code == 404
        r = await alice.post("/v1/guidelines/consult", json=again)
        assert r.status_code == 200 and r.json()["turn"] == 2


async def test_an_interview_grown_too_long_is_422_and_the_stored_consultation_is_unchanged() -> None:
    app, _, _ = build()
    long = [{"role": "user", "content": "fever " * 800}] * 6
    first = (await consult(app, {"messages": long, "diagnosis": "Malaria"})).json()
    cid = first["consultation_id"]
    r = await consult(app, {"messages": long[:5], "consultation_id": cid})  # fine alone, too long with turn 1
    assert r.status_code == 422 and "start a new consultation" in r.json()["detail"]
    r = await consult(app, {"messages": TURN_1, "consultation_id": cid})
    assert r.status_code == 200 and r.json()["turn"] == 2  # the refused turn was not stored


async def test_a_consultation_is_deleted_by_its_key_or_an_admin_and_is_gone_after() -> None:
    from services.gateway.security import key_digest
    from shared.settings import GatewaySettings

    hashes = f"{key_digest('alice-key')}, {key_digest('bob-key')}, {key_digest('root-key')}:read+admin"
    app, _, _ = build(gateway=GatewaySettings(api_key_hashes=hashes))  # type: ignore[call-arg]
    body = {"messages": TURN_1, "diagnosis": "Malaria"}
    async with client(app, "alice-key") as alice, client(app, "bob-key") as bob, client(app, "root-key") as root:
        cid = (await alice.post("/v1/guidelines/consult", json=body)).json()["consultation_id"]
        r = await bob.delete(f"/v1/guidelines/consult/{cid}")
        assert r.status_code == 404 and "no consultation" in r.json()["detail"]  # not bob's: as if unknown
        assert (await alice.delete(f"/v1/guidelines/consult/{cid}")).status_code == 204
        r = await alice.post("/v1/guidelines/consult", json={**body, "consultation_id": cid})
        assert r.status_code == 404  # gone: it cannot be continued
        assert (await alice.delete(f"/v1/guidelines/consult/{cid}")).status_code == 404
        other = (await alice.post("/v1/guidelines/consult", json=body)).json()["consultation_id"]
        assert (await root.delete(f"/v1/guidelines/consult/{other}")).status_code == 204  # the admin scope
        r = await alice.post("/v1/guidelines/consult", json={**body, "consultation_id": other})
        assert r.status_code == 404
