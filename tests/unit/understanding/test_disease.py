"""Disease-name normalisation for PubMed: the rules, the hit-count check and broadening, the LLM step."""

from __future__ import annotations

import pytest

from services.gateway.intelligence.cache import MemoryCache
from services.gateway.understanding.disease import (
    DiseaseNormalizer,
    drug_disease_query,
    is_blocked,
    rule_normalise,
)
from tests.fakes.workflow_anthropic import WorkflowAnthropic
from tests.unit.workflows.conftest import workflow_llm


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("narcolepsy-cataplexy syndrome", "narcolepsy"),
        ("Stage III non-small cell lung cancer", "non-small cell lung cancer"),
        ("type 2 diabetes mellitus", "diabetes mellitus"),
        ("BRCA1-associated breast cancer", "breast cancer"),
        ("Familial hypercholesterolemia", "hypercholesterolemia"),
        ("severe atopic dermatitis", "atopic dermatitis"),
        ("Hepatitis C virus-related hepatocellular carcinoma", "hepatocellular carcinoma"),
        ("Guillain-Barre syndrome", "guillain-barre syndrome"),  # not a disease + qualifier pair: kept whole
        ("obesity", "obesity"),
    ],
)
def test_rules_strip_qualifiers_and_keep_the_organ(raw: str, expected: str) -> None:
    assert rule_normalise(raw) == expected


def test_blocklist_and_query_shape() -> None:
    assert is_blocked("cancer") and is_blocked("Disease OR syndrome") and not is_blocked("lung cancer")
    assert drug_disease_query("bupropion", "obesity OR overweight") == "bupropion AND (obesity OR overweight)"
    assert drug_disease_query("metformin", "polycystic ovary syndrome") == 'metformin AND "polycystic ovary syndrome"'


async def test_normaliser_adds_a_synonym_and_keeps_a_term_with_enough_hits() -> None:
    counts = {"bupropion AND (obesity OR overweight)": 120}
    seen: list[str] = []

    async def count(q: str) -> int | None:
        seen.append(q)
        return counts.get(q, 0)

    n = DiseaseNormalizer(workflow_llm(None), MemoryCache(), count, min_results=3)
    out = await n.normalise("obesity", "bupropion")
    assert (out.search_term, out.count, out.broadened, out.method) == ("obesity OR overweight", 120, False, "rules")
    again = await n.normalise("obesity", "bupropion")  # cached: the count is not asked again
    assert again.method == "cache" and seen == ["bupropion AND (obesity OR overweight)"]


async def test_normaliser_broadens_below_the_minimum_but_never_to_a_blocked_word() -> None:
    counts = {'drugx AND ("non-small cell lung cancer" OR NSCLC)': 1, 'drugx AND "lung cancer"': 40}

    async def count(q: str) -> int | None:
        return counts.get(q, 0)

    normaliser = DiseaseNormalizer(workflow_llm(None), MemoryCache(), count)
    out = await normaliser.normalise("stage IV non-small cell lung cancer", "drugx")
    assert out.broadened and out.search_term == "lung cancer" and out.broader_count == 40


async def test_llm_normalises_and_a_blocked_broader_term_is_refused(fake_llm: WorkflowAnthropic) -> None:
    async def count(q: str) -> int | None:
        return 0  # too few hits: a broader term is asked for; the fake offers "disease" (blocklisted)

    n = DiseaseNormalizer(workflow_llm(fake_llm), MemoryCache(), count)
    out = await n.normalise("narcolepsy-cataplexy syndrome", "sodium oxybate")
    assert out.method == "llm" and out.normalised == "narcolepsy"
    assert out.broader == "disease" and not out.broadened and out.search_term == "narcolepsy"
    assert any("blocklist" in note for note in out.notes)
    assert any(r.body.get("tool_choice", {}).get("name") == "record_disease_term" for r in fake_llm.requests)
