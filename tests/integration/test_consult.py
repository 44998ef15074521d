"""``POST /v1/guidelines/consult`` through the running services, in both modes.

Offline: the caller gives the diagnosis, the findings come from the documented rules (labelled ``rules``) and
the recommend flow runs on the ingested CC0 malaria guideline; without a diagnosis it is a 422 with the
reason. With the fake Messages API (``tests/fakes/workflow_anthropic.py``; the gateway and the synthesizer
restarted with ``ANTHROPIC_API_KEY``/``ANTHROPIC_BASE_URL`` for this module's later tests, then restarted
back): the synthesizer's ``extract_findings`` step (over ``llm.steps.requests``) extracts the findings and
the working diagnosis, then the recommendation runs; an interview without a diagnosis gets
``needs_findings`` and publishes nothing to the retriever (the gateway's request/reply counters).

A consultation continued over two turns (``consultation_id``), offline and with the fake Messages API: the
second turn finds the first turn's findings stored in PostgreSQL (the ``consultations`` row), the synthesizer's
``differentials`` step ranks the differentials from all of them, and the likely one gets its own guideline
plan citing section title paths; another consultation id is a 404.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import asyncpg
import pytest

from services.gateway.intelligence.consult_state import ConsultationState
from services.gateway.store.consultations import (
    ConsultationConflict,
    PgConsultationStore,
    delete_idle_consultations,
    new_consultation_id,
)
from tests.fakes.workflow_anthropic import WorkflowAnthropic
from tests.integration.capture import capture
from tests.integration.conftest import Stack
from tests.integration.db import db_fetch
from tests.integration.workflow_data import ingest_guideline

pytestmark = [pytest.mark.integration, pytest.mark.slow]
KEYS = ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL")

INTERVIEW = [
    {"role": "assistant", "content": "What brings you in today?"},
    {"role": "user", "content": "I have had a fever for 3 days since I came back from Mozambique."},
    {"role": "assistant", "content": "Are you pregnant? Are you allergic to any medicine?"},
    {"role": "user", "content": "Yes, I am pregnant, first trimester. I am 28 years old. No allergies."},
]


@pytest.fixture(scope="module")
def guideline(stack: Stack) -> None:
    ingest_guideline(stack)


@pytest.fixture(scope="module")
def claude(stack: Stack, guideline: None) -> Iterator[WorkflowAnthropic]:
    fake = WorkflowAnthropic()
    fake.start()
    extra = {"ANTHROPIC_API_KEY": "test-key", "ANTHROPIC_BASE_URL": fake.url}
    try:
        for name in ("synthesizer", "gateway"):
            proc = stack.services.processes[name]
            proc.env = {**proc.env, **extra}
        stack.services.restart("synthesizer", "gateway")
        yield fake
    finally:
        for name in ("synthesizer", "gateway"):
            proc = stack.services.processes[name]
            proc.env = {k: v for k, v in proc.env.items() if k not in KEYS}
        stack.services.restart("synthesizer", "gateway")
        fake.stop()


def request_replies(metrics: str, topic: str) -> float:
    """The gateway's Kafka request/reply calls on ``topic`` so far (all outcomes)."""
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in metrics.splitlines()
        if line.startswith("evidentia_request_reply_seconds_count{") and f'topic="{topic}"' in line
    )


def consult(stack: Stack, body: dict[str, Any], label: str = "consult") -> tuple[int, dict[str, Any], str, str]:
    with stack.http() as http:
        before = http.get("/metrics").text
        r = http.post("/v1/guidelines/consult", json=body, timeout=120)
        after = http.get("/metrics").text
    capture(body, r, label)  # docs/workflows.md shows a real request and response
    return r.status_code, r.json(), before, after


def test_offline_the_callers_diagnosis_and_the_rules_findings(stack: Stack, guideline: None) -> None:
    status, body, _, _ = consult(stack, {"messages": INTERVIEW, "diagnosis": "Malaria"})
    assert status == 200, body
    assert body["status"] == "recommended" and body["extraction"] == "rules" and body["llm_calls"] == []
    assert body["diagnosis"] == "Malaria" and body["diagnosis_source"] == "caller"
    assert {(f["type"], f["text"]) for f in body["findings"]} == {
        ("age", "28 years old"),
        ("pregnancy", "pregnant, first trimester"),
        ("history", "travel to Mozambique"),
        ("symptom", "fever for 3 days"),
    }
    assert all(f["source"] == "rules" for f in body["findings"])
    rec = body["recommendation"]
    assert "Malaria in pregnancy" in rec["top_section"] and rec["assessment_mode"] == "template"
    assert rec["plan"] and all(c["citation_id"].startswith("NBK:") for c in rec["citations"])
    assert rec["query"].startswith("Malaria. age: 28 years old. pregnancy: pregnant, first trimester.")


def test_offline_without_a_diagnosis_is_refused_with_the_reason(stack: Stack, guideline: None) -> None:
    status, body, before, after = consult(stack, {"messages": INTERVIEW})
    assert status == 422 and "give `diagnosis`" in body["detail"]
    assert request_replies(after, "retrieval.requests") == request_replies(before, "retrieval.requests")


TURN_1 = [{"role": "user", "content": "I have had a fever for 3 days."}]
TURN_2 = [
    {"role": "assistant", "content": "Have you travelled recently? Are you pregnant?"},
    {"role": "user", "content": "Yes, I came back from Mozambique. I am pregnant, first trimester."},
]


def stored(stack: Stack, consultation_id: str) -> dict[str, Any] | None:
    """The consultation's row as PostgreSQL holds it (turns, findings, diagnoses), or None."""
    sql = "SELECT turns, findings, diagnoses FROM consultations WHERE consultation_id = $1"
    rows = db_fetch(stack.infra.postgres.url, sql, consultation_id)
    return {k: rows[0][k] for k in ("turns", "findings", "diagnoses")} if rows else None


def test_offline_a_consultation_continued_keeps_the_callers_diagnosis_and_the_findings(
    stack: Stack, guideline: None
) -> None:
    status, first, _, _ = consult(stack, {"messages": TURN_1, "diagnosis": "Malaria"})
    assert status == 200, first
    assert [(d["diagnosis"], d["source"], d["planned"]) for d in first["differentials"]] == [
        ("Malaria", "caller", True)
    ]
    status, second, before, after = consult(stack, {"messages": TURN_2, "consultation_id": first["consultation_id"]})
    assert status == 200, second
    assert (second["turn"], second["diagnosis"], second["diagnosis_source"]) == (2, "Malaria", "caller")
    assert [(f["text"], f["turn"]) for f in second["findings"]] == [
        ("fever for 3 days", 1),
        ("pregnant, first trimester", 2),
        ("travel to Mozambique", 2),
    ]
    assert "Malaria in pregnancy" in second["recommendation"]["top_section"]  # turn 2's pregnancy reached the search
    assert request_replies(after, "retrieval.requests") == request_replies(before, "retrieval.requests") + 1
    row = stored(stack, first["consultation_id"])
    assert row is not None and row["turns"] == 2 and "travel to Mozambique" in str(row["findings"])
    status, body, _, _ = consult(stack, {"messages": TURN_1, "consultation_id": "f" * 32})
    assert status == 404 and "no consultation" in body["detail"]


def test_with_claude_two_turns_accumulate_findings_and_rank_differentials_each_likely_one_planned(
    stack: Stack, claude: WorkflowAnthropic
) -> None:
    status, first, before, after = consult(stack, {"messages": TURN_1}, "consult-turn-1")
    assert status == 200, first
    assert first["turn"] == 1 and first["status"] == "needs_findings"
    assert [(d["diagnosis"], d["confidence"], d["planned"]) for d in first["differentials"]] == [
        ("Malaria", 0.25, False),
        ("Influenza", 0.2, False),
    ]
    assert request_replies(after, "retrieval.requests") == request_replies(before, "retrieval.requests")
    row = stored(stack, first["consultation_id"])
    assert row is not None and row["turns"] == 1

    body = {"messages": TURN_2, "consultation_id": first["consultation_id"]}
    status, second, before, after = consult(stack, body, "consult-turn-2")
    assert status == 200, second
    assert (second["consultation_id"], second["turn"]) == (first["consultation_id"], 2)
    assert [(f["type"], f["text"], f["turn"], f["source"]) for f in second["findings"]] == [
        ("symptom", "fever for 3 days", 1, "llm"),
        ("pregnancy", "pregnant, first trimester", 2, "llm"),
        ("history", "travel to Mozambique", 2, "llm"),
    ]
    malaria, typhoid = second["differentials"]
    assert (malaria["diagnosis"], malaria["confidence"], malaria["planned"]) == ("Malaria", 0.85, True)
    assert malaria["supporting_findings"] == ["fever for 3 days", "travel to Mozambique"]
    assert (typhoid["diagnosis"], typhoid["planned"], typhoid["recommendation"]) == ("Typhoid fever", False, None)
    plan = malaria["recommendation"]
    assert "Malaria in pregnancy" in plan["top_section"] and plan["plan"]
    assert all(
        p["sections"] and all(s.startswith("Guidelines for the treatment") for s in p["sections"]) for p in plan["plan"]
    )
    assert second["status"] == "recommended" and second["recommendation"] == plan  # one plan, one retrieval
    assert request_replies(after, "retrieval.requests") == request_replies(before, "retrieval.requests") + 1
    # the differentials step ran in the synthesizer on the fast model, over all the findings so far
    calls = {c["step"]: c for c in second["llm_calls"]}
    assert (calls["differentials"]["service"], calls["differentials"]["model"]) == ("synthesizer", "claude-haiku-4-5")
    [*_, asked] = [
        r for r in claude.requests if (r.body.get("tool_choice") or {}).get("name") == "record_differentials"
    ]
    assert '<finding id="F1" type="symptom">fever for 3 days</finding>' in asked.user_text
    row = stored(stack, first["consultation_id"])
    assert row is not None and row["turns"] == 2


def test_with_claude_the_findings_and_diagnosis_then_the_recommendation(
    stack: Stack, claude: WorkflowAnthropic
) -> None:
    status, body, before, after = consult(stack, {"messages": INTERVIEW})
    assert status == 200, body
    assert body["status"] == "recommended" and body["extraction"] == "llm"
    assert (body["diagnosis"], body["diagnosis_source"], body["confidence"]) == ("Malaria", "llm", 0.85)
    assert {(f["type"], f["source"]) for f in body["findings"]} == {
        ("symptom", "llm"),
        ("pregnancy", "llm"),
        ("history", "llm"),
    }
    rec = body["recommendation"]
    assert "Malaria in pregnancy" in rec["top_section"] and rec["assessment_mode"] == "llm"
    # the extraction ran in the synthesizer (fast model), asked over llm.steps.requests
    calls = {c["step"]: c for c in body["llm_calls"]}
    assert (calls["extract_findings"]["service"], calls["extract_findings"]["model"]) == (
        "synthesizer",
        "claude-haiku-4-5",
    )
    assert request_replies(after, "llm.steps.requests") > request_replies(before, "llm.steps.requests")
    assert request_replies(after, "retrieval.requests") == request_replies(before, "retrieval.requests") + 1
    [*_, extract] = [r for r in claude.requests if (r.body.get("tool_choice") or {}).get("name") == "record_findings"]
    assert '<message from="patient">I have had a fever for 3 days' in extract.user_text


def test_with_claude_no_diagnosis_yet_asks_for_the_missing_findings_and_retrieves_nothing(
    stack: Stack, claude: WorkflowAnthropic
) -> None:
    status, body, before, after = consult(stack, {"messages": [{"role": "user", "content": "I have a fever."}]})
    assert status == 200, body
    assert body["status"] == "needs_findings" and body["recommendation"] is None
    assert body["diagnosis"] is None and body["findings"] == [
        {"type": "symptom", "text": "fever for 3 days", "value": "3 days", "source": "llm", "turn": 1}
    ]
    assert body["missing"] == [
        "Have you travelled recently, and where to?",
        "Has a malaria blood smear or rapid test been done?",
    ]
    assert request_replies(after, "llm.steps.requests") > request_replies(before, "llm.steps.requests")
    assert request_replies(after, "retrieval.requests") == request_replies(before, "retrieval.requests")


def test_the_store_refuses_a_turn_that_lost_the_race_and_keeps_the_stored_one(stack: Stack, guideline: None) -> None:
    """Two turns read the same state; the one saved second is refused (the route's 409) and changes nothing."""
    status, first, _, _ = consult(stack, {"messages": TURN_1, "diagnosis": "Malaria"})
    assert status == 200, first
    cid = first["consultation_id"]

    async def race() -> None:
        pool = await asyncpg.create_pool(stack.infra.postgres.url, min_size=1, max_size=2)
        assert pool is not None
        try:
            store = PgConsultationStore(pool)
            a, b = await store.get(cid, None), await store.get(cid, None)
            assert a is not None and b is not None and a.turns == 1
            a.turns, a.diagnoses = 2, ["Malaria", "Dengue"]
            await store.save(a, 1)
            b.turns, b.diagnoses = 2, ["Malaria", "Typhoid fever"]
            with pytest.raises(ConsultationConflict):
                await store.save(b, 1)
            with pytest.raises(ConsultationConflict):  # a new consultation under a taken id
                await store.save(b, 0)
            kept = await store.get(cid, None)
            assert kept is not None and (kept.turns, kept.diagnoses) == (2, ["Malaria", "Dengue"])
            owned = ConsultationState(new_consultation_id(), "key-a", turns=1, diagnoses=["Malaria"])
            await store.save(owned, 0)
            assert await store.get(owned.consultation_id, "key-b") is None  # another key's
            mine = await store.get(owned.consultation_id, "key-a")
            assert mine is not None and mine.diagnoses == ["Malaria"] and await store.get(cid, "key-b") is not None
        finally:
            await pool.close()

    asyncio.run(race())


def test_the_store_deletes_a_consultation_for_its_key_and_the_idle_ones_for_retention(
    stack: Stack, guideline: None
) -> None:
    """``DELETE`` and the retention job's batch on PostgreSQL: only the owner's (or any with ``any_owner``),
    only consultations idle longer than the retention, oldest first, at most a batch."""

    async def run() -> None:
        pool = await asyncpg.create_pool(stack.infra.postgres.url, min_size=1, max_size=2)
        assert pool is not None
        try:
            store = PgConsultationStore(pool)
            owned = ConsultationState(new_consultation_id(), "key-a", turns=1, diagnoses=["Malaria"])
            await store.save(owned, 0)
            assert not await store.delete(owned.consultation_id, "key-b")  # not key-b's
            assert await store.get(owned.consultation_id, "key-a") is not None
            assert await store.delete(owned.consultation_id, "key-a")
            assert await store.get(owned.consultation_id, "key-a") is None
            assert not await store.delete(owned.consultation_id, "key-a")  # already gone
            admin = ConsultationState(new_consultation_id(), "key-a", turns=1, diagnoses=["Malaria"])
            await store.save(admin, 0)
            assert await store.delete(admin.consultation_id, "key-b", any_owner=True)

            idle = [ConsultationState(new_consultation_id(), None, turns=1, diagnoses=["Malaria"]) for _ in range(3)]
            fresh = ConsultationState(new_consultation_id(), None, turns=1, diagnoses=["Dengue"])
            for state in [*idle, fresh]:
                await store.save(state, 0)
            for age, state in zip((40, 35, 31), idle, strict=True):
                await pool.execute(
                    "UPDATE consultations SET updated_at = now() - make_interval(days => $2) "
                    "WHERE consultation_id = $1",
                    state.consultation_id,
                    age,
                )
            assert await delete_idle_consultations(pool, timedelta(days=30), 2) == 2  # the two oldest
            left = {s.consultation_id for s in [*idle, fresh] if await store.get(s.consultation_id, None)}
            assert left == {idle[2].consultation_id, fresh.consultation_id}
            assert await delete_idle_consultations(pool, timedelta(days=30), 2) == 1
            assert await store.get(fresh.consultation_id, None) is not None  # not idle: kept
        finally:
            await pool.close()

    asyncio.run(run())
