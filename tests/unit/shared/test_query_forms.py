"""``shared.models.QueryForm``: the one rendering of the structured queries (therapeutic intent, condition +
findings) that the gateway shows and sends and the retriever embeds, matches and reranks with."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from shared.models import THERAPEUTIC_TEMPLATE, QueryForm, finding_text


def test_the_therapeutic_form_renders_the_intent_with_drug_and_disease_trimmed() -> None:
    form = QueryForm(kind="therapeutic", drug=" bupropion ", disease="obesity ")
    assert form.text() == (
        "Evidence for bupropion as a treatment for obesity, including clinical trials, efficacy data, "
        "and mechanism of action"
    )
    assert form.text() == THERAPEUTIC_TEMPLATE.format(drug="bupropion", disease="obesity")


def test_the_condition_findings_form_is_one_sentence_each_and_skips_blank_findings() -> None:
    form = QueryForm(
        kind="condition-findings", condition=" Malaria ", findings=["symptom: fever 3 days", "  ", "Seen today!"]
    )
    assert form.text() == "Malaria. symptom: fever 3 days. Seen today!"
    assert form.keywords().split() == ["Malaria", "fever", "3", "days", "Seen", "today!"]  # the values only


def test_findings_are_written_kind_colon_value() -> None:
    written = finding_text(" Medical History ", " pregnant first trimester ")
    assert written == "medical_history: pregnant first trimester"
    assert finding_text("", "fever") == "fever"


def test_the_population_is_the_last_finding_and_a_blank_one_is_left_out() -> None:
    with_population = QueryForm.condition_findings("Malaria", ["symptom: fever 3 days"], " child under 5 ")
    assert with_population.findings == ["symptom: fever 3 days", "population: child under 5"]
    assert with_population.text() == "Malaria. symptom: fever 3 days. population: child under 5."
    assert QueryForm.condition_findings("Malaria", [], "  ").findings == []


def test_the_builder_cuts_to_the_form_limits_instead_of_failing() -> None:
    form = QueryForm.condition_findings("c" * 600, [f"sign: {i}" for i in range(60)], "adult")
    assert form.condition == "c" * 500 and len(form.findings) == 50 and form.findings[-1] == "sign: 49"
    with pytest.raises(ValidationError):
        QueryForm(kind="condition-findings", condition="x", findings=["f"] * 51)
