"""A stored consultation's state and how a turn adds to it (``POST /v1/guidelines/consult`` with
``consultation_id``): the interview grows by the turn's messages, the findings accumulate, the caller's
diagnoses are kept, and the latest differentials replace the earlier ones.

Findings are merged by what they are about (:func:`finding_key`): age and pregnancy are one finding each, a
vital sign one per measurement (temperature, blood pressure, ...), any other finding one per type and text.
A finding stated again unchanged keeps the turn that first recorded it; one whose statement changed (a new
temperature, a corrected age) is replaced by the newer statement and carries the turn that changed it; a
finding the latest extraction did not repeat is kept (the interview still says it).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from services.gateway.intelligence.consult import ClinicalFinding, FindingSource
from shared.models import CLINICAL_FINDING_TYPES, ClinicalFindingType

DiagnosisSource = Literal["llm", "caller"]

#: The kinds of which a patient has one finding: a newer statement replaces the older.
SINGLE_KINDS = frozenset({"age", "pregnancy"})
_MEASURE = re.compile(r"^([a-z][a-z ]*?)\s*(?:\d|$)")


@dataclass(frozen=True)
class RecordedFinding:
    """A finding of the consultation with the turn (1, 2, ...) that recorded it as it now reads."""

    type: ClinicalFindingType
    text: str
    value: str | None
    source: FindingSource
    turn: int


@dataclass(frozen=True)
class Differential:
    """One diagnosis of the differential: the model's (with its confidence, the findings it rests on and those
    that would tell it from the others) or the caller's (as given, no confidence)."""

    diagnosis: str
    confidence: float | None
    source: DiagnosisSource
    supporting: list[str] = field(default_factory=list)
    separating: list[str] = field(default_factory=list)


@dataclass
class ConsultationState:
    """What a consultation keeps between turns. ``turns`` counts the turns stored."""

    consultation_id: str
    owner: str | None
    turns: int = 0
    messages: list[dict[str, Any]] = field(default_factory=list)
    findings: list[RecordedFinding] = field(default_factory=list)
    diagnoses: list[str] = field(default_factory=list)
    differentials: list[Differential] = field(default_factory=list)
    population: str | None = None


def _norm(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip().lower()


def finding_key(kind: str, text: str) -> tuple[str, str]:
    """What a finding is about: the kind alone for age and pregnancy, the measurement for a vital sign
    ("temperature 38.9 C" -> temperature), else the kind and the text (case and spacing ignored)."""
    if kind in SINGLE_KINDS:
        return kind, ""
    if kind == "vital":
        m = _MEASURE.match(_norm(text))
        return kind, (m.group(1).strip() if m else _norm(text))
    return kind, _norm(text)


def merge_findings(
    stored: Sequence[RecordedFinding], found: Sequence[ClinicalFinding], turn: int
) -> list[RecordedFinding]:
    """The stored findings with this turn's: in the order first recorded, new ones after; see the module."""
    merged = list(stored)
    where = {finding_key(f.type, f.text): i for i, f in enumerate(merged)}
    for f in found:
        key = finding_key(f.type, f.text)
        new = RecordedFinding(f.type, f.text, f.value, f.source, turn)
        if key not in where:
            where[key] = len(merged)
            merged.append(new)
        elif _norm(merged[where[key]].text) != _norm(f.text) or merged[where[key]].value != f.value:
            merged[where[key]] = new
    return merged


def merge_diagnoses(stored: Sequence[str], given: str | None) -> list[str]:
    """The caller's diagnoses so far with this turn's (once each, case ignored), oldest first."""
    out = list(stored)
    if given and given.strip() and _norm(given) not in {_norm(d) for d in out}:
        out.append(given.strip())
    return out


def model_differentials(output: Mapping[str, Any], findings: Sequence[RecordedFinding]) -> list[Differential]:
    """The ``differentials`` step's output (checked by the synthesizer: ids among :func:`finding_ids`) with
    the finding ids read back as the findings' texts."""
    by_id = dict(zip(finding_ids(findings), findings, strict=True))
    return [
        Differential(
            diagnosis=str(d["diagnosis"]),
            confidence=float(d["confidence"]),
            source="llm",
            supporting=[by_id[i].text for i in d.get("supporting_finding_ids") or [] if i in by_id],
            separating=[str(s) for s in d.get("separating_findings") or []],
        )
        for d in output.get("differentials") or []
    ]


def with_callers(differentials: Sequence[Differential], diagnoses: Sequence[str]) -> list[Differential]:
    """The model's differentials, then each caller's diagnosis the model did not name (labelled ``caller``);
    one the model named too stays the model's, with its confidence."""
    named = {_norm(d.diagnosis) for d in differentials}
    return [*differentials, *(Differential(d, None, "caller") for d in diagnoses if _norm(d) not in named)]


def finding_ids(findings: Sequence[RecordedFinding]) -> list[str]:
    """The ids the differentials step cites findings by: F1, F2, ... in the findings' order."""
    return [f"F{i}" for i in range(1, len(findings) + 1)]


def step_findings(findings: Sequence[RecordedFinding]) -> list[dict[str, str]]:
    """The findings as the differentials step reads them: id, type, text."""
    return [{"id": i, "type": f.type, "text": f.text} for i, f in zip(finding_ids(findings), findings, strict=True)]


def dump(state: ConsultationState) -> dict[str, Any]:
    """The state's JSON columns (what the store writes)."""
    return {
        "messages": state.messages,
        "findings": [asdict(f) for f in state.findings],
        "diagnoses": state.diagnoses,
        "differentials": [asdict(d) for d in state.differentials],
    }


def load(
    consultation_id: str, owner: str | None, turns: int, columns: Mapping[str, Any], population: str | None
) -> ConsultationState:
    """The state from the store's columns (as :func:`dump` wrote them); entries of an unknown kind are dropped."""
    findings = [
        RecordedFinding(f["type"], f["text"], f.get("value"), f.get("source", "rules"), int(f.get("turn", 1)))
        for f in columns.get("findings") or []
        if isinstance(f, dict) and f.get("type") in CLINICAL_FINDING_TYPES and f.get("text")
    ]
    differentials = [
        Differential(
            d["diagnosis"],
            d.get("confidence"),
            d.get("source", "caller"),
            [str(x) for x in d.get("supporting") or []],
            [str(x) for x in d.get("separating") or []],
        )
        for d in columns.get("differentials") or []
        if isinstance(d, dict) and d.get("diagnosis")
    ]
    return ConsultationState(
        consultation_id=consultation_id,
        owner=owner,
        turns=turns,
        messages=list(columns.get("messages") or []),
        findings=findings,
        diagnoses=[str(d) for d in columns.get("diagnoses") or []],
        differentials=differentials,
        population=population,
    )
