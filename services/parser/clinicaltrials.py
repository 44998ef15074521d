"""A ClinicalTrials.gov study record (API v2 JSON) to one :class:`ParsedDocument`, chunked by section.

The record's shape is the registry's: ``protocolSection`` (``identificationModule``, ``statusModule``,
``descriptionModule``, ``conditionsModule``, ``designModule``, ``armsInterventionsModule``, ``outcomesModule``,
``eligibilityModule``), ``resultsSection`` when results are posted, and ``hasResults``. The sections of the
document, in order: Summary (the brief summary), Description (the detailed one), Conditions, Interventions,
Design (type, phase, status, enrolment, dates), Primary outcomes, Secondary outcomes, Eligibility and Results
(each outcome measure with its groups' values, then the adverse-event counts). A section the record lacks is
left out; a field of the wrong type is read as absent, and a record without an NCT number or a title is
refused with the reason. The phase, status and results flag are kept in ``trial`` for the trial filters.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any, cast, get_args

from services.parser.chunking import FullTextBuilder
from shared.models import EVIDENCE_WEIGHTS, Journal, ParsedDocument, StudyType, TrialFacts, TrialPhase, TrialStatus
from shared.sources.clinicaltrials import CLINICALTRIALS

#: The longest text kept of one field (a registry field past this is cut, with a mark): a record may carry
#: pages of free text, and one runaway field must not make the whole study a single enormous section.
MAX_FIELD_CHARS = 20_000
_CUT = " [...]"


class TrialParseError(ValueError):
    """The record is not a ClinicalTrials.gov study Evidentia can use."""


def _get(data: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(data, dict):
            return None
        data = data.get(key)
    return data


def _text(value: Any) -> str:
    """A string field as text (squashed blank runs kept to paragraphs), capped; anything else is absent."""
    if not isinstance(value, str):
        return ""
    text = "\n".join(" ".join(line.split()) for line in value.strip().splitlines()).strip()
    return text if len(text) <= MAX_FIELD_CHARS else text[:MAX_FIELD_CHARS] + _CUT


def _strings(value: Any) -> list[str]:
    return [t for t in (_text(v) for v in value) if t] if isinstance(value, list) else []


def _dicts(value: Any) -> list[dict[str, Any]]:
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _date(struct: Any) -> str | None:
    return _text(_get(struct, "date")) or None


def _interventions(arms: Any) -> Iterator[tuple[str, str]]:
    for item in _dicts(_get(arms, "interventions")):
        name = _text(item.get("name"))
        if name:
            kind = _text(item.get("type"))
            yield name, f"{name} ({kind.lower()})" if kind else name


def _outcomes(items: Any) -> str:
    lines = []
    for o in _dicts(items):
        measure = _text(o.get("measure"))
        if not measure:
            continue
        parts = [measure]
        if desc := _text(o.get("description")):
            parts.append(desc)
        if frame := _text(o.get("timeFrame")):
            parts.append(f"Time frame: {frame}")
        lines.append(". ".join(p.rstrip(".") for p in parts) + ".")
    return "\n".join(lines)


def _results(results: Any) -> str:
    """The posted results as sentences: each outcome measure with its groups' values, then adverse events."""
    out = []
    groups_of: dict[str, str] = {}
    for m in _dicts(_get(results, "outcomeMeasuresModule", "outcomeMeasures")):
        groups_of = {g["id"]: _text(g.get("title")) for g in _dicts(m.get("groups")) if isinstance(g.get("id"), str)}
        title = _text(m.get("title"))
        if not title:
            continue
        unit = _text(m.get("unitOfMeasure"))
        values = []
        for cls in _dicts(m.get("classes")):
            for cat in _dicts(cls.get("categories")):
                for v in _dicts(cat.get("measurements")):
                    group = groups_of.get(str(v.get("groupId")), str(v.get("groupId") or ""))
                    value = _text(v.get("value"))
                    if group and value:
                        values.append(f"{group}: {value}{f' {unit}' if unit else ''}")
        line = f"{title} ({_text(m.get('type')).lower() or 'outcome'})"
        if values:
            line += ": " + "; ".join(values)
        out.append(line + ".")
    ae = _get(results, "adverseEventsModule")
    for g in _dicts(_get(ae, "eventGroups")):
        title = _text(g.get("title"))
        serious, at_risk = _int(g.get("seriousNumAffected")), _int(g.get("seriousNumAtRisk"))
        if title and serious is not None and at_risk is not None:
            out.append(f"Serious adverse events, {title}: {serious} of {at_risk} participants.")
    return "\n".join(out)


def _phases(value: Any) -> list[TrialPhase]:
    known = get_args(TrialPhase)
    return [cast(TrialPhase, p) for p in (value if isinstance(value, list) else []) if p in known]


def _status(value: Any) -> TrialStatus | None:
    return cast(TrialStatus, value) if value in get_args(TrialStatus) else None


def _study_type(design: Any) -> StudyType:
    kind = _get(design, "studyType")
    if kind == "OBSERVATIONAL":
        return "observational"
    if _get(design, "designInfo", "allocation") == "RANDOMIZED":
        return "randomized-controlled-trial"
    return "clinical-trial"


def _design_text(facts: TrialFacts, design: Any) -> str:
    lines = []
    if facts.study_type:
        lines.append(f"Study type: {facts.study_type.lower().replace('_', ' ')}.")
    if facts.phases:
        lines.append(f"Phase: {', '.join(p.replace('_', ' ').lower() for p in facts.phases)}.")
    if facts.status:
        lines.append(f"Overall status: {facts.status.lower().replace('_', ' ')}.")
    if facts.enrollment is not None:
        kind = _text(_get(design, "enrollmentInfo", "type")).lower()
        lines.append(f"Enrollment: {facts.enrollment} participants{f' ({kind})' if kind else ''}.")
    if facts.start_date:
        lines.append(f"Start date: {facts.start_date}.")
    if facts.completion_date:
        lines.append(f"Completion date: {facts.completion_date}.")
    return "\n".join(lines)


def _year(*dates: str | None) -> int | None:
    for d in dates:
        if d and d[:4].isdigit():
            return int(d[:4])
    return None


def parse_study(study: Any) -> ParsedDocument:
    """One study record (decoded JSON) as a document; :class:`TrialParseError` when it has no NCT number or title."""
    protocol = _get(study, "protocolSection")
    if not isinstance(protocol, dict):
        raise TrialParseError("not a ClinicalTrials.gov study: no protocolSection object")
    ident = _get(protocol, "identificationModule")
    nct = _text(_get(ident, "nctId")).upper()
    if not CLINICALTRIALS.valid(nct):
        raise TrialParseError(f"not a ClinicalTrials.gov study: no valid nctId ({nct[:40]!r})")
    title = _text(_get(ident, "officialTitle")) or _text(_get(ident, "briefTitle"))
    if not title:
        raise TrialParseError(f"{nct}: the study has no title")
    status, design = _get(protocol, "statusModule"), _get(protocol, "designModule")
    description = _get(protocol, "descriptionModule")
    conditions = _strings(_get(protocol, "conditionsModule", "conditions"))
    interventions = list(_interventions(_get(protocol, "armsInterventionsModule")))
    results = _get(study, "resultsSection")
    facts = TrialFacts(
        phases=_phases(_get(design, "phases")),
        status=_status(_get(status, "overallStatus")),
        has_results=_get(study, "hasResults") is True or isinstance(results, dict),
        study_type=_text(_get(design, "studyType")) or None,
        enrollment=_int(_get(design, "enrollmentInfo", "count")),
        start_date=_date(_get(status, "startDateStruct")),
        completion_date=_date(_get(status, "completionDateStruct"))
        or _date(_get(status, "primaryCompletionDateStruct")),
        conditions=conditions,
        interventions=[name for name, _ in interventions],
    )
    summary = _text(_get(description, "briefSummary"))
    outcomes = _get(protocol, "outcomesModule")
    pieces: Iterable[tuple[str, str]] = (
        ("Summary", summary),
        ("Description", _text(_get(description, "detailedDescription"))),
        ("Conditions", "; ".join(conditions)),
        ("Interventions", "; ".join(label for _, label in interventions)),
        ("Design", _design_text(facts, design)),
        ("Primary outcomes", _outcomes(_get(outcomes, "primaryOutcomes"))),
        ("Secondary outcomes", _outcomes(_get(outcomes, "secondaryOutcomes"))),
        ("Eligibility", _text(_get(protocol, "eligibilityModule", "eligibilityCriteria"))),
        ("Results", _results(results)),
    )
    builder = FullTextBuilder()
    for name, text in pieces:
        if text:
            builder.add(name, text)
    full_text, sections = builder.build()
    study_type = _study_type(design)
    sponsor = _text(_get(protocol, "sponsorCollaboratorsModule", "leadSponsor", "name"))
    return ParsedDocument(
        source="clinicaltrials",
        source_id=nct,
        title=title,
        abstract=summary or None,
        pub_date=facts.start_date,
        year=_year(facts.start_date, _date(_get(status, "studyFirstPostDateStruct"))),
        language="en",
        publication_types=["Clinical Trial Registration"],
        study_type=study_type,
        evidence_level=EVIDENCE_WEIGHTS[study_type],
        keywords=_strings(_get(protocol, "conditionsModule", "keywords")),
        chemicals=facts.interventions,
        journal=Journal(title=f"ClinicalTrials.gov{f' ({sponsor})' if sponsor else ''}"),
        full_text=full_text or None,
        sections=sections,
        trial=facts,
    )


def parse_trial(content: bytes | str) -> list[ParsedDocument]:
    """A ``clinicaltrials-json`` document: one study record as the registry's JSON text."""
    try:
        study = json.loads(content)
    except (ValueError, UnicodeDecodeError) as exc:
        raise TrialParseError(f"not JSON: {exc}") from exc
    return [parse_study(study)]
