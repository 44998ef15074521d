"""The ``filters`` stage: the search's filters resolved once into a :class:`~.state.FilterPlan` that the legs
only read. A MeSH filter's descendants are looked up, the clause and what follows from its conditions derived,
the corpus counts read (the filter-first bound and the lexical leg need them), a restrictive filter's chunks
resolved when few pass it, and the doc values brought up to date when the lexical leg will check candidates
under a filter that narrows a held column."""

from __future__ import annotations

from services.retriever.engine.filters.fields import filter_clause, with_mesh_descendants
from services.retriever.engine.filters.passing import filter_first_max, passing_chunks
from services.retriever.engine.stages.state import EngineParts, FilterPlan, Search


async def run(engine: EngineParts, s: Search) -> None:
    s.filters = await with_mesh_descendants(engine.pool, s.filters)
    clause = filter_clause(s.filters)
    if clause.restrictive or s.with_lexical:
        s.counts = await engine.stats.get(engine.pool)
    # The lexical leg alone does not resolve a filter the doc values decide whole: dropping its failing
    # chunks does the same without reading them.
    decided_by_values = engine.doc_values is not None and clause.narrows and clause.held_whole
    passing = None
    if clause.restrictive and s.counts is not None and (s.with_dense or not decided_by_values):
        passing = await passing_chunks(engine.pool, clause, filter_first_max(s.depth, s.counts.chunks))
    values = None
    checks_candidates = passing is None or passing.chunks is None
    if s.with_lexical and engine.doc_values is not None and clause.narrows and checks_candidates:
        values = await engine.doc_values.current(engine.pool)
    s.plan = FilterPlan(clause, passing, values)
