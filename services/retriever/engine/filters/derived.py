"""What the engine asks of a filter, each derived from the declarations of
:mod:`services.retriever.engine.filters.fields`: the SQL ``WHERE`` clause over ``chunks c JOIN documents d``,
whether it restricts more than the defaults, whether it reads a chunk column, whether the doc values decide it
whole or narrow it, and the doc values' verdict for some chunks."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import asyncpg
import numpy as np

from services.retriever.engine.filters.fields import FILTERS, MESH_DESCENDANTS_SQL, FilterField, HeldColumns
from shared.models import SearchFilters


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
    return all(c.field.held is not None for c in conditions(filters)[0])


def narrows(filters: SearchFilters) -> bool:
    """Whether ``filters`` restrict a held column beyond the defaults (retracted papers and priority 0 out,
    which few chunks fail): only then is dropping the chunks that fail worth reading the change feed."""
    return any(c.binds and c.field.held is not None for c in conditions(filters)[0])


def held_passing(filters: SearchFilters, columns: HeldColumns, size: int) -> np.ndarray:
    """Whether each of ``size`` held chunks passes the conditions of ``filters`` that the doc values hold."""
    ok = np.ones(size, dtype=bool)
    for field in FILTERS:
        if field.held is not None and (passes := field.held(filters, columns)) is not None:
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
