"""What the stages of a search share: the engine's parts they run on (:class:`EngineParts`), one search's
state (:class:`Search`) and the filters resolved once for it (:class:`FilterPlan`).

The state is plain data: each stage reads what the stages before it wrote and writes its own fields, so a
search goes down the stages once and never comes back to a module it left."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import asyncpg
import numpy as np

from services.retriever.engine.config import SearchConfig
from services.retriever.engine.doc_values.columns import DocValues
from services.retriever.engine.doc_values.follower import DocValuesFollower
from services.retriever.engine.filters.fields import FilterClause
from services.retriever.engine.filters.passing import PassingSet
from services.retriever.engine.lexical.postings import CorpusCounts
from services.retriever.engine.lexical.postings_cache import PostingsCache
from services.retriever.engine.lexical.stats import CorpusStats
from services.retriever.engine.memo import LegMemo
from services.retriever.engine.scored import Scored
from services.retriever.engine.vector.tables import VectorIndex
from shared.models import SearchFilters

if TYPE_CHECKING:
    from services.retriever.engine.ranking.rerank import Reranker

Ranked = list[tuple[str, float]]


class EngineParts(Protocol):
    """What a search engine holds that its stages run on."""

    @property
    def pool(self) -> asyncpg.Pool: ...

    @property
    def index(self) -> VectorIndex: ...

    @property
    def config(self) -> SearchConfig: ...

    @property
    def stats(self) -> CorpusStats: ...

    @property
    def postings_cache(self) -> PostingsCache | None: ...

    @property
    def doc_values(self) -> DocValuesFollower | None: ...

    @property
    def memo(self) -> LegMemo | None: ...


@dataclass(frozen=True)
class FilterPlan:
    """A search's filters resolved once, before its legs run, which only read it."""

    clause: FilterClause
    """The ``WHERE`` clause and what is derived from the conditions (restrictive, chunk columns, held whole)."""
    passing: PassingSet | None = None
    """What a restrictive filter passes, resolved for the legs (None: nothing to resolve, or the lexical leg
    alone under a filter the doc values decide whole)."""
    doc_values: DocValues | None = None
    """The held filter columns, current, when the lexical leg checks candidates under a filter that narrows a
    held column (its chunks that fail for certain are dropped before the checks)."""


@dataclass
class Search:
    """One search as the stages see it: what was asked (and the mode's legs and depth, derived when it is
    made), then what each stage adds."""

    query: str
    vector: np.ndarray | None
    mode: str
    top_k: int
    top_n: int
    filters: SearchFilters
    ef_search: int
    extra_chunk_ids: Sequence[str]
    lexical_query: str | None
    rerank_query: str | None
    reranker: Reranker | None
    mmr: bool
    mmr_lambda: float
    hybrid: bool
    with_dense: bool
    with_lexical: bool
    depth: int
    """How deep each leg ranks: ``max(top_k, fusion_depth)`` in hybrid modes, else ``max(top_k, top_n)``."""
    plan: FilterPlan | None = None
    counts: CorpusCounts | None = None
    """The corpus counts, read once when the filter-first bound or the lexical leg needs them."""
    dense: list[Scored] = field(default_factory=list)
    lexical: list[Scored] = field(default_factory=list)
    ranked: Ranked = field(default_factory=list)
    rows: dict[str, asyncpg.Record] = field(default_factory=dict)
    extra: list[str] = field(default_factory=list)
    head: Ranked = field(default_factory=list)
    tail: Ranked = field(default_factory=list)
    rerank_by: dict[str, float] = field(default_factory=dict)
    reranker_used: str | None = None
