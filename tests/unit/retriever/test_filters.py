from __future__ import annotations

from services.retriever.store import where_clause
from shared.models import SearchFilters


def test_default_filter_excludes_retracted_only() -> None:
    sql, params = where_clause(SearchFilters(), 3)
    assert sql == "NOT d.retracted"
    assert params == []


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
