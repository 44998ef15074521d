"""The ``retrieve`` stage: the dense and/or lexical legs at once, each ``depth`` deep, on the filter plan
(:mod:`.filters`), each on its own connection: the database walks the HNSW graph while the lexical leg's
postings are read and scored (one failing cancels the other). The legs' rankings are memoised across
searches when the engine holds a memo."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Awaitable
from functools import partial

import numpy as np

from services.retriever.engine.lexical.postings import Bm25Scoring
from services.retriever.engine.lexical.rank import bm25_rank
from services.retriever.engine.scored import Scored
from services.retriever.engine.stages.state import EngineParts, Search
from services.retriever.engine.vector.search import dense_search


def dense_leg(engine: EngineParts, s: Search, vector: np.ndarray) -> Awaitable[list[Scored]]:
    """The dense leg's ranking from ``vector`` (a coroutine not started yet: started by whoever awaits it)."""
    assert s.plan is not None
    rank = partial(
        dense_search,
        engine.pool,
        engine.index,
        vector,
        s.depth,
        s.plan.clause,
        s.ef_search,
        passing=s.plan.passing,
        probes=engine.config.ivfflat_probes,
    )
    if engine.memo is None:
        return rank()
    digest = hashlib.sha1(np.asarray(vector, np.float32).tobytes()).hexdigest()
    key = ("dense", digest, s.depth, s.ef_search, engine.config.ivfflat_probes, repr(s.filters))
    return engine.memo.get(key, rank)


def lexical_leg(engine: EngineParts, s: Search) -> Awaitable[list[Scored]]:
    """The lexical leg's ranking (a coroutine not started yet)."""
    assert s.plan is not None and s.counts is not None
    p = engine.config.bm25
    query = s.lexical_query or s.query
    rank = partial(
        bm25_rank,
        engine.pool,
        query,
        s.depth,
        s.plan.clause,
        Bm25Scoring(p.k1, p.b, p.title_weight, p.section_weight, s.counts),
        passing=s.plan.passing,
        cache=engine.postings_cache,
        doc_values=s.plan.doc_values,
        pruning=p.pruning,
        threads=p.threads,
    )
    if engine.memo is None:
        return rank()
    return engine.memo.get(("lexical", p, query, s.depth, repr(s.filters)), rank)


async def run(engine: EngineParts, s: Search) -> None:
    legs: list[Awaitable[list[Scored]]] = []
    if s.with_dense:
        if s.vector is None:
            raise ValueError(f"mode {s.mode!r} needs a query vector")
        legs.append(dense_leg(engine, s, s.vector))
    if s.with_lexical:
        legs.append(lexical_leg(engine, s))
    tasks = [asyncio.ensure_future(leg) for leg in legs]
    try:
        results = await asyncio.gather(*tasks)
    except BaseException:
        for task in tasks:
            task.cancel()
        raise
    if s.with_dense:
        s.dense = results[0]
    if s.with_lexical:
        s.lexical = results[-1]
