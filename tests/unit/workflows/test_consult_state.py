"""The consultation's state between turns: findings merged by what they are about, the caller's diagnoses
kept, the model's differentials read back from finding ids, and the state's JSON round trip."""

from __future__ import annotations

from services.gateway.intelligence.consult import ClinicalFinding
from services.gateway.intelligence.consult_state import (
    ConsultationState,
    Differential,
    RecordedFinding,
    dump,
    finding_key,
    load,
    merge_diagnoses,
    merge_findings,
    model_differentials,
    step_findings,
    with_callers,
)


def found(kind: str, text: str, value: str | None = None) -> ClinicalFinding:
    return ClinicalFinding(kind, text, value, "rules")  # type: ignore[arg-type]


def test_findings_accumulate_over_turns_and_an_unchanged_one_keeps_its_first_turn() -> None:
    first = merge_findings([], [found("symptom", "fever for 3 days", "3 days"), found("age", "28 years old", "28")], 1)
    second = merge_findings(first, [found("symptom", "Fever  for 3 days", "3 days"), found("sign", "jaundice")], 2)
    assert [(f.type, f.text, f.turn) for f in second] == [
        ("symptom", "fever for 3 days", 1),  # said again (case and spacing aside): still turn 1's
        ("age", "28 years old", 1),  # not repeated by the second extraction: kept
        ("sign", "jaundice", 2),
    ]


def test_a_changed_statement_replaces_the_older_one_in_place() -> None:
    first = merge_findings(
        [],
        [
            found("age", "28 years old", "28"),
            found("vital", "temperature 38.9 C", "38.9 C"),
            found("pregnancy", "pregnant"),
        ],
        1,
    )
    second = merge_findings(
        first,
        [
            found("vital", "temperature 37.2 C", "37.2 C"),
            found("vital", "heart rate 110/min", "110/min"),
            found("pregnancy", "pregnant, first trimester", "first trimester"),
            found("age", "29 years old", "29"),
        ],
        2,
    )
    assert [(f.text, f.turn) for f in second] == [
        ("29 years old", 2),
        ("temperature 37.2 C", 2),  # the same measurement: the newer value
        ("pregnant, first trimester", 2),
        ("heart rate 110/min", 2),  # another measurement: a finding of its own
    ]


def test_the_finding_key() -> None:
    assert finding_key("vital", "Blood pressure 120/80 mmHg") == ("vital", "blood pressure")
    assert finding_key("age", "40 years old") == finding_key("age", "41 years old")
    assert finding_key("symptom", "Cough ") == ("symptom", "cough") != finding_key("sign", "cough")


def test_the_callers_diagnoses_are_kept_once_each_oldest_first() -> None:
    kept = merge_diagnoses(merge_diagnoses([], "Malaria"), " malaria ")
    assert kept == ["Malaria"]
    assert merge_diagnoses(kept, "Typhoid fever") == ["Malaria", "Typhoid fever"]
    assert merge_diagnoses(kept, None) == ["Malaria"]


def test_the_models_differentials_cite_findings_by_id_and_the_callers_follow_labelled() -> None:
    findings = [
        RecordedFinding("symptom", "fever", None, "llm", 1),
        RecordedFinding("history", "travel", None, "llm", 2),
    ]
    assert step_findings(findings) == [
        {"id": "F1", "type": "symptom", "text": "fever"},
        {"id": "F2", "type": "history", "text": "travel"},
    ]
    output = {
        "differentials": [
            {
                "diagnosis": "Malaria",
                "confidence": 0.7,
                "supporting_finding_ids": ["F2", "F1"],
                "separating_findings": ["Rapid test"],
            }
        ]
    }
    model = model_differentials(output, findings)
    assert model == [Differential("Malaria", 0.7, "llm", ["travel", "fever"], ["Rapid test"])]
    merged = with_callers(model, ["malaria", "Dengue"])
    assert [(d.diagnosis, d.source, d.confidence) for d in merged] == [
        ("Malaria", "llm", 0.7),  # named by both: the model's, with its confidence
        ("Dengue", "caller", None),
    ]


def test_the_state_survives_its_json_columns() -> None:
    state = ConsultationState(
        "c1",
        "key-1",
        turns=2,
        messages=[{"role": "user", "content": "fever", "turn": 1}],
        findings=[RecordedFinding("symptom", "fever", None, "rules", 1)],
        diagnoses=["Malaria"],
        differentials=[Differential("Malaria", None, "caller"), Differential("Dengue", 0.4, "llm", ["fever"], ["NS1"])],
        population="adult",
    )
    assert load("c1", "key-1", 2, dump(state), "adult") == state
    # an entry of an unknown kind (written by a later version, or damaged) is dropped, not fatal
    columns = {**dump(state), "findings": [{"type": "lab", "text": "x"}, {"type": "sign", "text": "rash"}]}
    assert [f.text for f in load("c1", None, 2, columns, None).findings] == ["rash"]
