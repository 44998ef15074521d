"""PubMed search-term expansion over five axes, within their caps (rules and the LLM step)."""

from __future__ import annotations

from services.gateway.intelligence.cache import MemoryCache
from services.gateway.understanding.expansion import (
    AXIS_CAPS,
    MAX_QUERIES,
    MIN_QUERIES,
    DrugProfile,
    SearchQuery,
    SearchTermExpander,
    enforce_caps,
    rule_organ,
    rule_queries,
)
from tests.fakes.workflow_anthropic import WorkflowAnthropic
from tests.unit.workflows.conftest import workflow_llm

PROFILE = DrugProfile(
    synonyms=["Wellbutrin", "Zyban", "Aplenzin"],
    target_gene_symbols=["SLC6A3", "SLC6A2", "CHRNA3"],
    mechanisms_of_action=[
        "Dopamine transporter inhibitor",
        "Norepinephrine transporter inhibitor",
        "Nicotinic receptor antagonist",
    ],
    atc_codes=["N06AX12"],
    atc_descriptions=["Other antidepressants"],
    drug_type="small molecule",
)


def test_rules_cover_the_five_axes_within_their_caps() -> None:
    queries = rule_queries("bupropion", "obesity OR overweight", rule_organ("obesity"), PROFILE)
    assert MIN_QUERIES <= len(queries) <= MAX_QUERIES
    axes = [q.axis for q in queries]
    assert set(axes) == {"drug", "class_organ", "mechanism_organ", "target_gene", "synonym"}
    for axis, cap in AXIS_CAPS.items():
        assert axes.count(axis) <= cap
    assert queries[0].query == "bupropion AND (obesity OR overweight)"
    assert 'antidepressants AND "adipose tissue"' in [q.query for q in queries]


def test_without_a_profile_the_drug_axis_pads_to_five() -> None:
    queries = rule_queries("bupropion", "obesity", "adipose tissue", DrugProfile())
    assert len(queries) == MIN_QUERIES and {q.axis for q in queries} == {"drug"}
    assert len({q.query for q in queries}) == MIN_QUERIES


def test_caps_drop_repeats_and_excess() -> None:
    many = [SearchQuery("target_gene", f"G{i} AND x") for i in range(5)] + [SearchQuery("drug", "a AND b")] * 3
    capped = enforce_caps(many)
    assert [q.axis for q in capped].count("target_gene") == AXIS_CAPS["target_gene"]
    assert [q.query for q in capped].count("a AND b") == 1


async def test_llm_expansion_is_capped_and_the_organ_comes_first(fake_llm: WorkflowAnthropic) -> None:
    expander = SearchTermExpander(workflow_llm(fake_llm), MemoryCache())
    out = await expander.expand("sodium oxybate", "narcolepsy", DrugProfile())
    assert out.organ == "brain" and out.organ_method == "llm"
    axes = [q.axis for q in out.queries]
    assert axes.count("drug") == AXIS_CAPS["drug"]  # the fake offers five drug-axis queries: three kept
    assert out.method in ("llm", "llm+rules") and MIN_QUERIES <= len(out.queries) <= MAX_QUERIES
    organ_calls = [
        i for i, r in enumerate(fake_llm.requests) if r.body.get("tool_choice", {}).get("name") == "record_organ_term"
    ]
    term_calls = [
        i for i, r in enumerate(fake_llm.requests) if r.body.get("tool_choice", {}).get("name") == "record_search_terms"
    ]
    assert organ_calls and term_calls and organ_calls[-1] < term_calls[-1]
    cached_out = await expander.expand("sodium oxybate", "narcolepsy", DrugProfile())
    assert cached_out.method == "cache" and cached_out.queries == out.queries
