from __future__ import annotations

import pytest
from pydantic import ValidationError

from services.retriever.engine.filters.fields import FILTERS, is_restrictive, reads_chunk_columns, where_clause
from shared.models import CliFlag, SearchFilters


def test_default_filter_excludes_retracted_and_priority_zero_only() -> None:
    sql, params = where_clause(SearchFilters(), 3)
    assert sql == "NOT d.retracted AND d.priority > 0"
    assert params == []
    sql, params = where_clause(SearchFilters(include_retracted=True), 3)
    assert sql == "d.priority > 0"  # priority 0 is excluded even when everything else is allowed


def test_min_priority_replaces_the_exclusion_with_a_bound() -> None:
    sql, params = where_clause(SearchFilters(min_priority=50, include_retracted=True), 4)
    assert sql == "d.priority >= $4" and params == [50]
    with pytest.raises(ValidationError):
        SearchFilters(min_priority=0)  # 0 would let excluded documents through
    with pytest.raises(ValidationError):
        SearchFilters(min_priority=101)


def test_every_filter_becomes_a_numbered_parameter() -> None:
    f = SearchFilters(
        year_from=2010,
        year_to=2020,
        journals=["Lancet"],
        study_types=["randomized-controlled-trial"],
        min_evidence_level=0.8,
        mesh=["Diabetes Mellitus"],
        sources=["pubmed"],
        include_retracted=True,
    )
    sql, params = where_clause(f, 3)
    assert "retracted" not in sql
    assert "d.year >= $3" in sql and "d.year <= $4" in sql
    assert "$9" in sql and "$10" not in sql
    assert params == [2010, 2020, ["lancet"], ["randomized-controlled-trial"], 0.8, ["Diabetes Mellitus"], ["pubmed"]]


def test_the_trial_filters_read_the_trial_columns_and_restrict() -> None:
    f = SearchFilters(trial_phase=["PHASE2", "PHASE3"], trial_status=["RECRUITING"], has_results=False)
    sql, params = where_clause(f, 2)
    assert sql == (
        "NOT d.retracted AND d.priority > 0 AND d.trial_phases && $2::text[] AND d.trial_status = ANY($3::text[]) "
        "AND d.has_results = $4"
    )
    assert params == [["PHASE2", "PHASE3"], ["RECRUITING"], False]
    assert is_restrictive(SearchFilters(has_results=True)) and not reads_chunk_columns(f)
    with pytest.raises(ValidationError):
        SearchFilters(trial_phase=["PHASE5"])  # type: ignore[list-item]
    with pytest.raises(ValidationError):
        SearchFilters(trial_status=["OPEN"])  # type: ignore[list-item]


def test_sections_are_matched_through_the_stores_section_names() -> None:
    sql, params = where_clause(SearchFilters(sections=[" Results ", "Conclusions"], include_retracted=True), 2)
    # One rule for both sides: the chunk's path and the requested names both go through section_names().
    assert sql == (
        "d.priority > 0 AND section_names(c.section) && ARRAY(SELECT DISTINCT n FROM unnest($2::text[]) AS s, "
        "unnest(section_names(s)) AS n)"
    )
    assert params == [["Results", "Conclusions"]]


def test_sections_must_be_named() -> None:
    with pytest.raises(ValidationError):
        SearchFilters(sections=["  "])
    with pytest.raises(ValidationError):
        SearchFilters(sections=["x"] * 21)


def test_citation_filters_join_the_icite_metrics_by_pmid() -> None:
    f = SearchFilters(min_citation_count=100, min_nih_percentile=90, include_retracted=True)
    sql, params = where_clause(f, 3)
    # EXISTS on the PMID: a document with no imported metrics (or no PMID) fails either filter.
    assert sql == (
        "d.priority > 0 AND EXISTS (SELECT 1 FROM citation_metrics icm WHERE icm.pmid = d.pmid "
        "AND icm.citation_count >= $3) AND EXISTS (SELECT 1 FROM citation_metrics icm WHERE icm.pmid = d.pmid "
        "AND icm.nih_percentile >= $4)"
    )
    assert params == [100, 90.0]
    assert "citation_metrics" not in where_clause(SearchFilters(), 1)[0]  # no join unless asked for


@pytest.mark.parametrize(
    "bad", [{"min_citation_count": -1}, {"min_nih_percentile": 100.5}, {"min_nih_percentile": -0.1}]
)
def test_citation_filters_are_bounded(bad: dict[str, float]) -> None:
    with pytest.raises(ValidationError):
        SearchFilters.model_validate(bad)


def test_every_filter_field_is_declared_once_for_the_engine() -> None:
    declared = [f.name for f in FILTERS]
    assert sorted(declared) == sorted(SearchFilters.model_fields)  # a new field without a declaration fails here
    assert len(declared) == len(set(declared))


def test_restrictiveness_and_chunk_columns_follow_the_declarations() -> None:
    assert not is_restrictive(SearchFilters())
    assert not is_restrictive(SearchFilters(include_retracted=True, mesh_descendants=False, max_chunks_per_document=1))
    assert is_restrictive(SearchFilters(min_priority=1))  # a bound, even the default's, is a value to check
    assert is_restrictive(SearchFilters(journals=["Lancet"]))
    assert reads_chunk_columns(SearchFilters(sections=["Results"]))
    assert not reads_chunk_columns(SearchFilters(year_from=2000, mesh=["Humans"]))


def test_the_cli_options_come_from_the_filter_fields() -> None:
    fields = SearchFilters.model_fields.items()
    flags = {m.flag: name for name, f in fields for m in f.metadata if isinstance(m, CliFlag)}
    assert flags == {
        "--year-from": "year_from",
        "--year-to": "year_to",
        "--min-citations": "min_citation_count",
        "--min-percentile": "min_nih_percentile",
    }
