"""ClinicalTrials.gov study records (API v2 JSON) to documents: the fixtures shaped like the registry's answers
(tests/fixtures/clinicaltrials/README.md) and hostile records."""

from __future__ import annotations

import copy
import hashlib
import json
from typing import Any

import pytest

from services.parser.chunking import Chunker
from services.parser.clinicaltrials import MAX_FIELD_CHARS, TrialParseError, parse_study, parse_trial
from services.parser.core import ParseError, parse_content
from services.parser.handlers import parse_event
from shared.events import DocumentFetched
from shared.kafka.errors import PoisonEvent
from shared.models import ParsedDocument
from tests.fakes.clinicaltrials_server import load_fixture


def _section_text(doc: Any, title: str) -> str:
    sec = next(s for s in doc.sections if s.title == title)
    return str(doc.full_text[sec.char_start : sec.char_end])


def test_a_study_with_results_becomes_one_document_with_its_sections_and_facts(chunker: Chunker) -> None:
    raw = json.dumps(load_fixture("NCT04000001"))
    (doc,) = parse_content("clinicaltrials-json", raw, chunker=chunker)
    assert doc.document_id == "clinicaltrials:NCT04000001" and doc.source == "clinicaltrials"
    assert doc.url == "https://clinicaltrials.gov/study/NCT04000001"
    assert doc.title.startswith("A Randomized, Double-Blind")  # the official title first
    assert [s.title for s in doc.sections] == [
        "Summary",
        "Description",
        "Conditions",
        "Interventions",
        "Design",
        "Primary outcomes",
        "Secondary outcomes",
        "Eligibility",
        "Results",
    ]
    assert doc.trial is not None
    assert doc.trial.phases == ["PHASE3"] and doc.trial.status == "COMPLETED" and doc.trial.has_results
    assert doc.trial.enrollment == 412 and doc.trial.completion_date == "2021-09-30"
    assert doc.trial.interventions == ["Metformin", "Placebo"]
    assert doc.study_type == "randomized-controlled-trial" and doc.year == 2019
    assert "Metformin: -1.1 percentage points; Placebo: -0.2 percentage points" in _section_text(doc, "Results")
    assert "Serious adverse events, Metformin: 9 of 206 participants." in _section_text(doc, "Results")
    assert "eGFR below 45" in _section_text(doc, "Eligibility")
    assert "Phase: phase3." in _section_text(doc, "Design")
    # chunked by section like the other sources: each chunk names the section it lies in
    assert doc.chunks and {c.section for c in doc.chunks} >= {"Summary", "Eligibility", "Results"}


def test_a_recruiting_study_without_results_has_no_results_section() -> None:
    doc = parse_study(load_fixture("NCT05000002"))
    assert doc.trial is not None and not doc.trial.has_results and doc.trial.status == "RECRUITING"
    assert doc.title == "Semaglutide Added to Metformin in Type 2 Diabetes With Obesity"  # no official title
    assert "Results" not in [s.title for s in doc.sections] and "Description" not in [s.title for s in doc.sections]
    assert doc.study_type == "clinical-trial" and doc.year == 2023


@pytest.mark.parametrize(
    ("mutate", "reason"),
    [
        (lambda s: s.pop("protocolSection"), "no protocolSection"),
        (lambda s: s["protocolSection"].update(identificationModule=[]), "no valid nctId"),
        (lambda s: s["protocolSection"]["identificationModule"].update(nctId="NCT123"), "no valid nctId"),
        (lambda s: s["protocolSection"]["identificationModule"].update(briefTitle=None, officialTitle=7), "no title"),
    ],
)
def test_a_record_without_identity_is_refused_with_the_reason(mutate: Any, reason: str) -> None:
    study = copy.deepcopy(load_fixture("NCT05000002"))
    mutate(study)
    with pytest.raises(TrialParseError, match=reason):
        parse_study(study)


def test_fields_of_the_wrong_type_are_read_as_absent() -> None:
    study = copy.deepcopy(load_fixture("NCT04000001"))
    p = study["protocolSection"]
    p["designModule"]["phases"] = "PHASE3"  # a string, not a list
    p["designModule"]["enrollmentInfo"]["count"] = "many"
    p["statusModule"]["overallStatus"] = {"nested": True}
    p["conditionsModule"]["conditions"] = [None, 5, "Type 2 Diabetes Mellitus"]
    p["armsInterventionsModule"]["interventions"] = ["Metformin", {"name": 3}, {"type": "DRUG", "name": "Placebo"}]
    p["outcomesModule"] = "none"
    study["resultsSection"]["outcomeMeasuresModule"]["outcomeMeasures"][0]["classes"] = {"x": 1}
    doc = parse_study(study)
    assert doc.trial is not None
    assert doc.trial.phases == [] and doc.trial.enrollment is None and doc.trial.status is None
    assert doc.trial.conditions == ["Type 2 Diabetes Mellitus"] and doc.trial.interventions == ["Placebo"]
    assert "Primary outcomes" not in [s.title for s in doc.sections]
    assert "Change in HbA1c from baseline (primary)." in _section_text(doc, "Results")


def test_a_huge_field_is_cut_and_the_document_still_chunks(chunker: Chunker) -> None:
    study = copy.deepcopy(load_fixture("NCT05000002"))
    study["protocolSection"]["descriptionModule"]["detailedDescription"] = "word " * 200_000
    (doc,) = parse_content("clinicaltrials-json", json.dumps(study), chunker=chunker)
    description = _section_text(doc, "Description")
    assert len(description) <= MAX_FIELD_CHARS + 10 and description.endswith("[...]")
    assert len(doc.chunks) > 10


@pytest.mark.parametrize("content", ["", "not json", "[1, 2]", "null", '{"protocolSection": "x"}'])
def test_content_that_is_no_study_is_a_poison_event_with_the_reason(content: str, chunker: Chunker) -> None:
    with pytest.raises(ValueError):
        parse_trial(content)
    if not content:
        return  # an empty record is refused before it becomes an event (DocumentFetched needs content)
    event = DocumentFetched(
        document_id="clinicaltrials:NCT00000000",
        source="clinicaltrials",
        source_id="NCT00000000",
        format="clinicaltrials-json",
        content=content,
    )
    with pytest.raises(PoisonEvent, match="clinicaltrials-json"):
        parse_event(event, chunker)


def test_an_unknown_format_names_the_known_ones(chunker: Chunker) -> None:
    with pytest.raises(ParseError, match="clinicaltrials-json"):
        parse_content("trial-xml", "<x/>", chunker=chunker)


def test_the_content_hash_of_a_document_without_a_trial_is_what_it_was() -> None:
    plain = ParsedDocument(source="pubmed", source_id="1", title="A paper")
    before = hashlib.sha256(plain.model_dump_json(exclude={"chunks", "priority", "trial"}).encode()).hexdigest()
    assert plain.content_hash() == before  # stored documents are not all seen as changed
    doc = parse_study(load_fixture("NCT05000002"))
    assert doc.trial is not None
    moved = doc.model_copy(update={"trial": doc.trial.model_copy(update={"status": "COMPLETED"})})
    assert moved.content_hash() != doc.content_hash()  # a trial's new status is a change
