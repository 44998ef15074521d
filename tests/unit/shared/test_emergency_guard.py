"""The emergency guard (``shared.safety``): precision and recall on the labelled sets, its reasons, its reply.

The goals (issue #15): no clinician's or researcher's question blocked, and at least 95% of emergencies
caught, on the training set and on the held-out set that was never trained or tuned on. The figures are
recorded in docs/benchmarks.md (``bench/emergency_guard.py`` prints them).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shared.safety import (
    EMERGENCY_ANSWER,
    GUARD_WEIGHTS,
    EmergencyGuard,
    EmergencyVerdict,
    default_guard,
    emergency_reply,
    rule_verdict,
)
from shared.settings import SafetySettings

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "emergency"


def _rows(name: str) -> list[dict[str, str]]:
    return [json.loads(line) for line in (FIXTURES / name).read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def guard() -> EmergencyGuard:
    g = default_guard()
    assert g.semantic, "the semantic model's weights (shared/safety_guard.json) must load"
    return g


@pytest.mark.parametrize("name", ["guard_set.jsonl", "guard_heldout.jsonl"])
def test_precision_and_recall_meet_the_goals(guard: EmergencyGuard, name: str) -> None:
    rows = _rows(name)
    verdicts = guard.check_many([r["text"] for r in rows])
    emergencies = [v for r, v in zip(rows, verdicts, strict=True) if r["label"] == "emergency"]
    blocked = [r["text"] for r, v in zip(rows, verdicts, strict=True) if r["label"] != "emergency" and v.emergency]
    recall = sum(v.emergency for v in emergencies) / len(emergencies)
    assert not blocked, f"questions blocked: {blocked}"
    assert recall >= 0.95, f"recall {recall:.3f} on {name}"
    assert all(v.reason for v in verdicts)


def test_the_sets_are_what_the_issue_asks_for() -> None:
    rows = _rows("guard_set.jsonl")
    assert len(rows) >= 150
    topics = {r["topic"] for r in rows if r["label"] != "emergency"}
    assert {"overdose", "suicidality", "anaphylaxis", "chest-pain", "stroke", "sepsis"} <= topics
    assert {r["voice"] for r in rows if r["label"] == "emergency"} == {"first-person", "bystander"}
    heldout = {r["text"] for r in _rows("guard_heldout.jsonl")}
    trained = {
        r["text"] for n in ("guard_set", "guard_round1", "guard_round2", "guard_round3") for r in _rows(f"{n}.jsonl")
    }
    assert not heldout & trained  # the held-out set shares no message with the training data
    assert "guard_heldout.jsonl" not in json.loads(GUARD_WEIGHTS.read_text())["trained_on"]


def test_the_issues_examples(guard: EmergencyGuard) -> None:
    clinician = [
        "My patient took an overdose of paracetamol; when should acetylcysteine be started?",
        "Which antidepressants raise suicidal ideation in adolescents and how should we monitor them?",
    ]
    for q in clinician:
        assert not guard.check(q).emergency, q
    v = guard.check("I have crushing chest pain and can't breathe right now")
    assert v.emergency and v.situation in {"not breathing or choking", "chest pain"}
    assert v.person == "the writer" and "semantic model" in v.reason and v.probability is not None


def test_the_reason_names_the_situation_and_the_person(guard: EmergencyGuard) -> None:
    v = guard.check("my grandmother's face is drooping on one side and she can't lift her arm")
    assert v.emergency and v.situation == "signs of a stroke" and v.person == "someone with the writer"
    assert "signs of a stroke" in v.reason and "grandmother" in v.reason
    reply = emergency_reply(v, "trace-1", 1.5)
    assert reply.mode == "emergency" and reply.answer == EMERGENCY_ANSWER and reply.trace_id == "trace-1"
    assert reply.emergency is not None and reply.emergency.reason == v.reason
    assert reply.emergency.situation == "signs of a stroke" and reply.emergency.probability == v.probability


def test_a_clinicians_question_is_never_blocked_and_an_intent_to_die_always_is(guard: EmergencyGuard) -> None:
    # even where the model leans towards an emergency, a clinician's framing decides
    v = guard.check("My patient is not breathing and his lips are blue after an opioid overdose; naloxone dose?")
    assert not v.emergency and v.rule == "clinician"
    v = guard.check("I want to kill myself, is there evidence that ketamine helps?")
    assert v.emergency and v.rule == "intent"


def test_without_the_semantic_model_the_rules_decide() -> None:
    rules_only = EmergencyGuard(SafetySettings(semantic=False))  # type: ignore[call-arg]
    assert not rules_only.semantic and rules_only.probability("x") is None
    v = rules_only.check("my dad is clutching his chest and he's gone grey and sweaty")
    assert isinstance(v, EmergencyVerdict) and v.emergency and v.probability is None
    assert not rules_only.check("Prevalence of suicidal ideation among medical students").emergency
    other_model = EmergencyGuard(SafetySettings(guard_model="bge-small-en-v1.5"))  # type: ignore[call-arg]
    assert not other_model.semantic  # weights trained for another model are not used


def test_rules_tell_history_and_topics_from_a_person_in_danger() -> None:
    assert rule_verdict("My father had a heart attack two years ago; what diet helps prevent another?").rule in {
        "history",
        "framed",
    }
    assert not rule_verdict("Clozapine and suicide prevention in schizophrenia").emergency
    assert rule_verdict("thinking about suicide").emergency
    assert rule_verdict("I feel suicidal and want to know if the evidence says therapy helps").rule == "intent"
    assert rule_verdict("I study suicide in adolescents: which risk factors matter most?").rule != "intent"
