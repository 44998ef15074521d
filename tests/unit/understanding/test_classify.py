"""Question classification by the rules, and the drugs of an interaction question."""

from __future__ import annotations

import pytest

from services.gateway.understanding.classify import drug_pair, rule_classify


@pytest.mark.parametrize(
    ("question", "category"),
    [
        ("Is there an interaction between warfarin and aspirin?", "drug_interaction"),
        ("What do the guidelines recommend for malaria in pregnancy?", "guideline"),
        ("What are the side effects of bupropion?", "drug_information"),
        ("What causes psoriasis?", "disease_information"),
        ("My father has chest pain right now", "emergency"),
        ("Hello there", "other"),
    ],
)
def test_rule_classification(question: str, category: str) -> None:
    assert rule_classify(question).category == category


def test_drug_pair() -> None:
    assert drug_pair("Is there an interaction between warfarin and aspirin?") == ["warfarin", "aspirin"]
    assert drug_pair("Can I take ibuprofen with lisinopril?") == ["ibuprofen", "lisinopril"]
