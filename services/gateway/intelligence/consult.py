"""The guideline consultation (``POST /v1/guidelines/consult``): an interview in, typed clinical findings and
a working diagnosis out; guideline retrieval (the recommend flow) only once a diagnosis is known.

With an API key the synthesizer's ``extract_findings`` step (Claude, forced tool use, its output checked
there) extracts the findings and states the working diagnosis with a confidence from 0 to 1. Offline, or
when that step fails, the findings come from the rules below, each labelled ``source: "rules"``, and the
diagnosis must come from the caller.

The rules read the patient's messages only (``role: user``): an interviewer's question ("Are you allergic
to penicillin?") is not a finding. A sentence part with a negation ("no", "not", "denies", "without")
just before the match is skipped. In order:

- **age**: "NN-year-old", "NN years old", "NN years of age", "aged NN", "age NN" (0-120).
- **pregnancy**: "pregnant"/"pregnancy", with "first/second/third trimester" or "NN weeks" when said.
- **vital**: temperature ("temperature 38.9", "38.9 °C", "102 degrees F"; above 45 without a unit is read
  as Fahrenheit), blood pressure ("BP 120/80", "blood pressure of 120/80"), heart rate ("HR 110",
  "heart rate 110", "pulse 110"), respiratory rate ("RR 22", "respiratory rate 22"), oxygen saturation
  ("SpO2 94%", "saturation 94%").
- **allergy**: "allergic to X", "allergy to X", "X allergy" (X up to the end of the sentence, a list split at
  commas and "and").
- **medication**: "taking X", "takes X", "on medication X", "prescribed X", "I take X" (a list split at
  commas and "and").
- **history**: "history of X", "diagnosed with X", "known X" (e.g. "known asthma"), "had X before",
  "travelled to X", "came back from X" (travel is history).
- **symptom**: a word of :data:`SYMPTOMS` with "for N days/weeks/hours" after it when said.
- **sign**: a word of :data:`SIGNS` (what an examination shows: jaundice, rash, splenomegaly, ...).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from shared.models import CLINICAL_FINDING_TYPES, ClinicalFindingType

FindingSource = Literal["llm", "rules"]


@dataclass(frozen=True)
class ClinicalFinding:
    type: ClinicalFindingType
    text: str
    value: str | None
    source: FindingSource


SYMPTOMS = (
    "fever",
    "chills",
    "headache",
    "cough",
    "shortness of breath",
    "breathlessness",
    "chest pain",
    "abdominal pain",
    "nausea",
    "vomiting",
    "diarrhoea",
    "diarrhea",
    "fatigue",
    "tiredness",
    "dizziness",
    "sore throat",
    "runny nose",
    "muscle pain",
    "joint pain",
    "back pain",
    "sweats",
    "night sweats",
    "weight loss",
    "loss of appetite",
    "burning on urination",
    "painful urination",
    "itching",
    "palpitations",
    "confusion",
    "seizure",
    "bleeding",
)
SIGNS = (
    "jaundice",
    "rash",
    "splenomegaly",
    "hepatomegaly",
    "pallor",
    "wheeze",
    "wheezing",
    "crackles",
    "oedema",
    "edema",
    "neck stiffness",
    "lymphadenopathy",
    "dehydration",
    "cyanosis",
)

_NEGATION = re.compile(r"\b(?:no|not|denies|deny|without|never)\b[^.,;:!?]*$", re.IGNORECASE)
_NUM = r"(\d{1,3}(?:\.\d)?)"
_LIST_END = r"(?=[.;!?]|,\s*(?:and\s+)?(?:i|she|he|they|but|no)\b|\s+(?:and|but|since|for)\s|$)"
_AGE = re.compile(
    r"\b(\d{1,3})[- ](?:year|yr)s?[- ]old\b|\baged?\s+(\d{1,3})\b|\b(\d{1,3}) years of age\b", re.IGNORECASE
)
_PREGNANCY = re.compile(
    r"\bpregnan(?:t|cy)\b(?:[^.;]*?\b(first|second|third|1st|2nd|3rd) trimester|[^.;]*?\b(\d{1,2}) weeks)?",
    re.IGNORECASE,
)
_VITALS: tuple[tuple[str, re.Pattern[str], str], ...] = (
    (
        "temperature",
        re.compile(rf"\b(?:temperature|temp)\b(?:\s+(?:of|is|was))?\s*:?\s*{_NUM}\s*°?\s*([CF])?\b", re.I),
        "{0} {1}",
    ),
    (
        "temperature",
        re.compile(rf"(?<![\d/]){_NUM}\s*°\s*([CF])\b|\b{_NUM}\s*(?:degrees)\s*([CF])?\b", re.I),
        "{0} {1}",
    ),
    (
        "blood pressure",
        re.compile(r"\b(?:BP|blood pressure)\b(?:\s+(?:of|is|was))?\s*:?\s*(\d{2,3})\s*/\s*(\d{2,3})", re.I),
        "{0}/{1} mmHg",
    ),
    ("heart rate", re.compile(r"\b(?:HR|heart rate|pulse)\b(?:\s+(?:of|is|was))?\s*:?\s*(\d{2,3})\b", re.I), "{0}/min"),
    (
        "respiratory rate",
        re.compile(r"\b(?:RR|respiratory rate)\b(?:\s+(?:of|is|was))?\s*:?\s*(\d{1,2})\b", re.I),
        "{0}/min",
    ),
    (
        "oxygen saturation",
        re.compile(
            r"\b(?:SpO2|O2 sat\w*|oxygen saturation|saturation|sats)\b(?:\s+(?:of|is|was))?\s*:?\s*(\d{2,3})\s*%", re.I
        ),
        "{0}%",
    ),
)
_SENTENCE_END = r"(?=[.;!?\n]|$)"
_ALLERGY = re.compile(rf"\ballerg(?:ic|y) to\s+(.+?){_SENTENCE_END}|\b([a-z][\w-]+) allergy\b", re.IGNORECASE)
_MEDICATION = re.compile(
    rf"\b(?:taking|takes|i take|on medication|prescribed|currently on)\s+(.+?){_SENTENCE_END}", re.IGNORECASE
)
_HISTORY = re.compile(
    rf"\b(?:history of|diagnosed with|known)\s+(.+?){_LIST_END}|\bhad\s+(.+?)\s+before\b"
    rf"|\b(?:travell?ed to|came back from|returned from|been to)\s+(.+?){_LIST_END}",
    re.IGNORECASE,
)
_DURATION = (
    r"(?:\s+(?:for|since)\s+(?:the\s+(?:last|past)\s+)?"
    r"(\d{1,3}|a|one|two|three|four|five|six|seven)\s+(hours?|days?|weeks?|months?))?"
)
_SYMPTOM = re.compile(r"\b(" + "|".join(re.escape(s) for s in SYMPTOMS) + r")s?\b" + _DURATION, re.IGNORECASE)
_SIGN = re.compile(r"\b(" + "|".join(re.escape(s) for s in SIGNS) + r")\b", re.IGNORECASE)
_SPLIT = re.compile(r",\s*(?:and\s+)?|\s+and\s+", re.IGNORECASE)


def _negated(text: str, start: int) -> bool:
    return bool(_NEGATION.search(text[max(0, start - 40) : start]))


def _clean(x: str) -> str:
    return re.sub(r"\s+", " ", x).strip(" .,;:'\"").strip()


def rule_findings(messages: Sequence[dict[str, Any]]) -> list[ClinicalFinding]:
    """The findings the documented rules (this module's docstring) find in the patient's messages, in the
    order of the rules, each once, labelled ``source: "rules"``."""
    said = "\n".join(str(m.get("content") or "") for m in messages if m.get("role") == "user")
    found: list[ClinicalFinding] = []

    def add(kind: ClinicalFindingType, text: str, value: str | None = None) -> None:
        text = _clean(text)
        if text and all((f.type, f.text.lower()) != (kind, text.lower()) for f in found):
            found.append(ClinicalFinding(kind, text[:500], value, "rules"))

    for m in _AGE.finditer(said):
        age = next(g for g in m.groups() if g)
        if int(age) <= 120 and not _negated(said, m.start()):
            add("age", f"{int(age)} years old", str(int(age)))
    for m in _PREGNANCY.finditer(said):
        if _negated(said, m.start()):
            continue
        trimester, weeks = m.group(1), m.group(2)
        ordinal = {"1st": "first", "2nd": "second", "3rd": "third"}.get((trimester or "").lower(), trimester)
        detail = f"{ordinal.lower()} trimester" if ordinal else (f"{weeks} weeks" if weeks else None)
        add("pregnancy", f"pregnant, {detail}" if detail else "pregnant", detail)
    for name, pattern, shape in _VITALS:
        for m in pattern.finditer(said):
            groups = [g for g in m.groups() if g is not None]
            if name == "temperature":
                number = next((g for g in m.groups() if g and g[0].isdigit()), None)
                unit = next((g for g in m.groups() if g and g.upper() in ("C", "F")), None)
                if number is None:
                    continue
                unit = (unit or ("F" if float(number) > 45 else "C")).upper()
                value = f"{number} {unit}"
            else:
                value = shape.format(*groups)
            if not any(f.type == "vital" and f.text.startswith(name) for f in found):
                add("vital", f"{name} {value}", value)
    for m in _ALLERGY.finditer(said):
        if not _negated(said, m.start()):
            for x in filter(None, map(_clean, _SPLIT.split(m.group(1) or m.group(2) or ""))):
                add("allergy", f"allergic to {x}", x)
    for m in _MEDICATION.finditer(said):
        if not _negated(said, m.start()):
            for x in _SPLIT.split(m.group(1)):
                add("medication", x, None)
    for m in _HISTORY.finditer(said):
        if _negated(said, m.start()):
            continue
        if m.group(3):
            add("history", f"travel to {_clean(m.group(3))}", None)
        else:
            add("history", m.group(1) or m.group(2), None)
    for m in _SYMPTOM.finditer(said):
        if _negated(said, m.start()):
            continue
        symptom, n, unit = m.group(1).lower(), m.group(2), m.group(3)
        duration = f"{n} {unit.lower()}" if n and unit else None
        add("symptom", f"{symptom} for {duration}" if duration else symptom, duration)
    for m in _SIGN.finditer(said):
        if not _negated(said, m.start()):
            add("sign", m.group(1).lower(), None)
    return found


def llm_findings(output: dict[str, Any]) -> list[ClinicalFinding]:
    """The step's findings (checked by the synthesizer), each labelled ``source: "llm"``; an entry of an
    unknown type or without text is dropped here too."""
    out = []
    for f in output.get("findings") or []:
        if isinstance(f, dict) and f.get("type") in CLINICAL_FINDING_TYPES and str(f.get("text") or "").strip():
            value = f.get("value")
            out.append(ClinicalFinding(f["type"], str(f["text"]).strip()[:500], str(value) if value else None, "llm"))
    return out


#: What the offline consultation asks for when the findings have none of a kind (the guideline sections a
#: recommendation finds depend on them).
RULE_QUESTIONS: dict[str, str] = {
    "age": "How old is the patient?",
    "pregnancy": "Is the patient pregnant (and if so, which trimester)?",
    "symptom": "What are the main symptoms, and for how long?",
    "vital": "What are the vital signs (temperature, blood pressure, heart rate)?",
    "medication": "What medications does the patient take?",
    "allergy": "Does the patient have any drug allergies?",
}


def rule_questions(findings: Sequence[ClinicalFinding]) -> list[str]:
    """The questions of :data:`RULE_QUESTIONS` whose kind no finding has."""
    have = {f.type for f in findings}
    return [q for kind, q in RULE_QUESTIONS.items() if kind not in have]


#: The findings' kinds as a condition-findings query writes them (the recommend flow's ``medical_history``).
RECOMMEND_KIND = {"history": "medical_history"}


def recommend_kind(kind: str) -> str:
    return RECOMMEND_KIND.get(kind, kind)
