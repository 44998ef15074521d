"""Search filters -> a SQL WHERE clause over ``documents d`` (parameters numbered from a given start)."""

from __future__ import annotations

from typing import Any

from shared.models import SearchFilters


def where_clause(filters: SearchFilters, first_param: int) -> tuple[str, list[Any]]:
    """``(sql, params)`` where sql is ``TRUE`` or conditions joined by AND, using $first_param..."""
    conds: list[str] = []
    params: list[Any] = []

    def p(value: Any) -> str:
        params.append(value)
        return f"${first_param + len(params) - 1}"

    if not filters.include_retracted:
        conds.append("NOT d.retracted")
    if filters.year_from is not None:
        conds.append(f"d.year >= {p(filters.year_from)}")
    if filters.year_to is not None:
        conds.append(f"d.year <= {p(filters.year_to)}")
    if filters.journals:
        journals = [j.lower() for j in filters.journals]
        ph = p(journals)
        conds.append(f"(lower(d.journal) = ANY({ph}::text[]) OR lower(d.journal_iso) = ANY({ph}::text[]))")
    if filters.study_types:
        conds.append(f"d.study_type = ANY({p(list(filters.study_types))}::text[])")
    if filters.min_evidence_level is not None:
        conds.append(f"d.evidence_level >= {p(filters.min_evidence_level)}")
    if filters.mesh:
        ph = p(list(filters.mesh))
        if filters.mesh_descendants:
            # Descendants through the MeSH tree numbers when the tree is loaded (mesh_tree); else exact.
            conds.append(
                f"d.mesh_terms && ({ph}::text[] || ARRAY(SELECT c.descriptor FROM mesh_tree p "
                "JOIN mesh_tree c ON c.tree_number = p.tree_number OR c.tree_number LIKE p.tree_number || '.%' "
                f"WHERE lower(p.descriptor) = ANY(SELECT lower(x) FROM unnest({ph}::text[]) AS x)))"
            )
        else:
            conds.append(f"d.mesh_terms && {ph}::text[]")
    if filters.sources:
        conds.append(f"d.source = ANY({p(list(filters.sources))}::text[])")
    return (" AND ".join(conds) or "TRUE"), params
