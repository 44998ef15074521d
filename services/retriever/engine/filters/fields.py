"""One declaration per search filter: each :class:`~shared.models.SearchFilters` field's SQL condition, its
doc-values predicate and whether it reads a chunk column (:data:`FILTERS`). Everything the engine asks of a
filter is derived here from these: the ``WHERE`` clause, whether a filter restricts more
than the defaults, whether it reads a chunk column, whether the doc values decide it whole or narrow it, and
their verdict for some chunks.

The field's type, bounds, gateway description and CLI flag are declared on the field itself in
``shared/models.py`` (the gateway and the CLI cannot import the engine); ``tests/unit/retriever/test_filters.py``
checks that every field of the model has exactly one declaration here.

A condition is written over ``chunks c JOIN documents d`` and binds each value it compares with as a numbered
parameter (``bind``). One that binds a value restricts more than the defaults do (retracted papers and priority
0 out): that is what "restrictive" means to the engine. The doc-values predicate mirrors the SQL for the held
columns, SQL's NULL rules included (a NULL fails every comparison); ``tests/integration/test_doc_values_store.py``
checks the two agree on every chunk for random filters. The declarations are in the order the conditions are
written in the clause.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import asyncpg
import numpy as np

from shared.models import SearchFilters

#: Binds a value as the next numbered parameter and returns its placeholder (``$3``).
Bind = Callable[[Any], str]


class HeldColumns(Protocol):
    """The doc values' filter columns of some chunks, compared as SQL compares (a NULL fails every comparison)."""

    def at_least(self, column: str, value: float) -> np.ndarray: ...

    def at_most(self, column: str, value: float) -> np.ndarray: ...

    def one_of(self, column: str, values: Sequence[str]) -> np.ndarray: ...

    def is_false(self, column: str) -> np.ndarray: ...

    def any_of(self, column: str, values: Sequence[str]) -> np.ndarray: ...


@dataclass(frozen=True)
class FilterField:
    """How the engine applies one :class:`~shared.models.SearchFilters` field."""

    name: str
    sql: Callable[[SearchFilters, Bind], str | None]
    """The field's condition (None when its value adds none: unset, or a modifier of another field's)."""
    held: Callable[[SearchFilters, HeldColumns], np.ndarray | None] | None = None
    """Its doc-values predicate (None when the value adds no condition); a field without one is not held in
    the doc values: every chunk *may* pass it there, and the SQL decides."""
    chunk_columns: bool = False
    """Whether the condition reads a column of ``chunks c`` (else ``documents d`` alone, which a vector row
    reaches by its own document id)."""
    held_if: Callable[[SearchFilters], bool] | None = None
    """When the doc values hold the condition only for some values (None: whenever ``held`` is given): a MeSH
    filter whose descendants are still to be looked up in the tree is not theirs to decide."""

    def holds(self, filters: SearchFilters) -> bool:
        """Whether the doc values decide this field's condition for ``filters``."""
        return self.held is not None and (self.held_if is None or self.held_if(filters))


def _none(_f: SearchFilters, _bind: Bind) -> None:
    return None


#: The descriptors below any of ``{names}`` (a ``text[]``, any case) in the MeSH tree (``mesh_tree``, empty
#: unless the tree was loaded): what a MeSH filter with descendants matches besides the names themselves.
MESH_DESCENDANTS_SQL = (
    "SELECT c.descriptor FROM mesh_tree p "
    "JOIN mesh_tree c ON c.tree_number = p.tree_number OR c.tree_number LIKE p.tree_number || '.%' "
    "WHERE lower(p.descriptor) = ANY(SELECT lower(x) FROM unnest({names}::text[]) AS x)"
)


def _citation(column: str) -> str:
    # Citation metrics (iCite) are joined by PMID: a document without a row fails the filter.
    return f"EXISTS (SELECT 1 FROM citation_metrics icm WHERE icm.pmid = d.pmid AND icm.{column} >= {{}})"


def _journals(f: SearchFilters, bind: Bind) -> str | None:
    if not f.journals:
        return None
    ph = bind([j.lower() for j in f.journals])
    return f"(lower(d.journal) = ANY({ph}::text[]) OR lower(d.journal_iso) = ANY({ph}::text[]))"


def _mesh(f: SearchFilters, bind: Bind) -> str | None:
    if not f.mesh:
        return None
    ph = bind(list(f.mesh))
    if f.mesh_descendants:
        # Descendants through the MeSH tree numbers when the tree is loaded (mesh_tree); else exact.
        return f"d.mesh_terms && ({ph}::text[] || ARRAY({MESH_DESCENDANTS_SQL.format(names=ph)}))"
    return f"d.mesh_terms && {ph}::text[]"


def _sections(f: SearchFilters, bind: Bind) -> str | None:
    if not f.sections:
        return None
    # Names as the store's section_names() reads them, on both sides: one rule.
    return (
        f"section_names(c.section) && ARRAY(SELECT DISTINCT n FROM unnest({bind(list(f.sections))}::text[]) "
        "AS s, unnest(section_names(s)) AS n)"
    )


FILTERS: tuple[FilterField, ...] = (
    FilterField(
        "include_retracted",
        lambda f, _b: None if f.include_retracted else "NOT d.retracted",
        held=lambda f, h: None if f.include_retracted else h.is_false("retracted"),
    ),
    FilterField(
        # Priority 0 ("exclude") is never returned, whatever the filters say.
        "min_priority",
        lambda f, b: "d.priority > 0" if f.min_priority is None else f"d.priority >= {b(f.min_priority)}",
        held=lambda f, h: h.at_least("priority", 1 if f.min_priority is None else f.min_priority),
    ),
    FilterField(
        "min_citation_count",
        lambda f, b: (
            None if f.min_citation_count is None else _citation("citation_count").format(b(f.min_citation_count))
        ),
    ),
    FilterField(
        "min_nih_percentile",
        lambda f, b: (
            None if f.min_nih_percentile is None else _citation("nih_percentile").format(b(f.min_nih_percentile))
        ),
    ),
    FilterField(
        "year_from",
        lambda f, b: None if f.year_from is None else f"d.year >= {b(f.year_from)}",
        held=lambda f, h: None if f.year_from is None else h.at_least("year", f.year_from),
    ),
    FilterField(
        "year_to",
        lambda f, b: None if f.year_to is None else f"d.year <= {b(f.year_to)}",
        held=lambda f, h: None if f.year_to is None else h.at_most("year", f.year_to),
    ),
    FilterField("journals", _journals),
    FilterField(
        "study_types",
        lambda f, b: f"d.study_type = ANY({b(list(f.study_types))}::text[])" if f.study_types else None,
        held=lambda f, h: h.one_of("study_type", f.study_types) if f.study_types else None,
    ),
    FilterField(
        "min_evidence_level",
        lambda f, b: None if f.min_evidence_level is None else f"d.evidence_level >= {b(f.min_evidence_level)}",
        held=lambda f, h: None if f.min_evidence_level is None else h.at_least("evidence", f.min_evidence_level),
    ),
    FilterField(
        "mesh",
        _mesh,
        # Held once the descendants are listed (:func:`with_mesh_descendants`): the values know no tree.
        held=lambda f, h: h.any_of("mesh", f.mesh) if f.mesh else None,
        held_if=lambda f: not f.mesh_descendants,
    ),
    # A modifier of ``mesh`` (its condition is mesh's).
    FilterField("mesh_descendants", _none),
    FilterField(
        "sources",
        lambda f, b: f"d.source = ANY({b(list(f.sources))}::text[])" if f.sources else None,
        held=lambda f, h: h.one_of("source", f.sources) if f.sources else None,
    ),
    # A registered trial's facts (ClinicalTrials.gov); NULL for any other document, which fails them.
    FilterField(
        "trial_phase",
        lambda f, b: f"d.trial_phases && {b(list(f.trial_phase))}::text[]" if f.trial_phase else None,
    ),
    FilterField(
        "trial_status",
        lambda f, b: f"d.trial_status = ANY({b(list(f.trial_status))}::text[])" if f.trial_status else None,
    ),
    FilterField(
        "has_results",
        lambda f, b: None if f.has_results is None else f"d.has_results = {b(f.has_results)}",
    ),
    FilterField("sections", _sections, chunk_columns=True),
    # Drug labels keep the names and RxCUIs they are for in their metadata (``DrugLabel.match_terms``).
    FilterField(
        "drugs",
        lambda f, b: (
            f"(d.metadata -> 'drug_label' -> 'match_terms') ?| {b(list(f.drugs))}::text[]" if f.drugs else None
        ),
    ),
    # Not a condition: applied to the ranking (at most this many passages a paper).
    FilterField("max_chunks_per_document", _none),
)


@dataclass(frozen=True)
class Condition:
    """One field's condition in a clause, and whether it binds a value (restricts beyond the defaults)."""

    field: FilterField
    sql: str
    binds: bool


def conditions(filters: SearchFilters, first_param: int = 1) -> tuple[list[Condition], list[Any]]:
    """The conditions of ``filters`` in clause order, numbered from ``$first_param``, and their parameters."""
    params: list[Any] = []

    def bind(value: Any) -> str:
        params.append(value)
        return f"${first_param + len(params) - 1}"

    out: list[Condition] = []
    for field in FILTERS:
        before = len(params)
        sql = field.sql(filters, bind)
        if sql is not None:
            out.append(Condition(field, sql, len(params) > before))
    return out, params


def where_clause(filters: SearchFilters, first_param: int) -> tuple[str, list[Any]]:
    """``(sql, params)`` where sql is ``TRUE`` or conditions joined by AND, using $first_param..."""
    conds, params = conditions(filters, first_param)
    return (" AND ".join(c.sql for c in conds) or "TRUE"), params


def is_restrictive(filters: SearchFilters) -> bool:
    """Whether ``filters`` restrict more than the defaults (the retracted flag, priority > 0) do."""
    return any(c.binds for c in conditions(filters)[0])


def reads_chunk_columns(filters: SearchFilters) -> bool:
    """Whether :func:`where_clause` of ``filters`` reads a column of ``chunks c``; every other filter reads
    ``documents d`` alone, which a vector row reaches by its own document id."""
    return any(c.field.chunk_columns for c in conditions(filters)[0])


def holds_all(filters: SearchFilters) -> bool:
    """Whether the doc values decide ``filters`` whole (every condition has a doc-values predicate): then a
    chunk the values hold passes exactly when :func:`held_passing` says so."""
    return all(c.field.holds(filters) for c in conditions(filters)[0])


def narrows(filters: SearchFilters) -> bool:
    """Whether ``filters`` restrict a held column beyond the defaults (retracted papers and priority 0 out,
    which few chunks fail): only then is dropping the chunks that fail worth reading the change feed."""
    return any(c.binds and c.field.holds(filters) for c in conditions(filters)[0])


def held_passing(filters: SearchFilters, columns: HeldColumns, size: int) -> np.ndarray:
    """Whether each of ``size`` held chunks passes the conditions of ``filters`` that the doc values hold."""
    ok = np.ones(size, dtype=bool)
    for field in FILTERS:
        if field.held is not None and field.holds(filters) and (passes := field.held(filters, columns)) is not None:
            ok &= passes
    return ok


async def with_mesh_descendants(pool: asyncpg.Pool, filters: SearchFilters) -> SearchFilters:
    """``filters`` with a MeSH filter's descendants looked up once and listed (``mesh_descendants`` then
    off): the same chunks pass, but each statement compares against a given array, whose share the planner
    estimates from the column's statistics, instead of one built by a subquery, which it guesses (1 %): the
    guess sent a MeSH filter on 96 % of the chunks to be counted first, reading thousands of rows a search.
    Filters without a MeSH filter with descendants come back as they are."""
    if not (filters.mesh and filters.mesh_descendants):
        return filters
    below = await pool.fetchval(f"SELECT ARRAY({MESH_DESCENDANTS_SQL.format(names='$1')})", list(filters.mesh))
    mesh = list(dict.fromkeys([*filters.mesh, *(below or [])]))
    return filters.model_copy(update={"mesh": mesh, "mesh_descendants": False})


#: The parameter numbers a filter's clause may start at: the engine's statements bind at most two values of
#: their own before the filter's (a query vector and k, a limit, candidate keys).
FIRST_PARAMS = (1, 2, 3)


@dataclass(frozen=True)
class FilterClause:
    """Everything the engine asks of one search's filters, derived once (:func:`filter_clause`): the legs
    and the filter-first resolution read these instead of deriving each again."""

    filters: SearchFilters
    where: dict[int, str]
    """The ``WHERE`` clause (:func:`where_clause`) by the number of its first parameter (:data:`FIRST_PARAMS`)."""
    params: list[Any]
    """The clause's parameters, in order."""
    restrictive: bool
    """:func:`is_restrictive`."""
    chunk_columns: bool
    """:func:`reads_chunk_columns`."""
    held_whole: bool
    """:func:`holds_all`."""
    narrows: bool
    """:func:`narrows`."""


def filter_clause(filters: SearchFilters) -> FilterClause:
    """The clause of ``filters`` and what the engine derives from its conditions, in one pass."""
    conds, params = conditions(filters)
    return FilterClause(
        filters,
        {first: where_clause(filters, first)[0] for first in FIRST_PARAMS},
        params,
        restrictive=any(c.binds for c in conds),
        chunk_columns=any(c.field.chunk_columns for c in conds),
        held_whole=all(c.field.holds(filters) for c in conds),
        narrows=any(c.binds and c.field.holds(filters) for c in conds),
    )
