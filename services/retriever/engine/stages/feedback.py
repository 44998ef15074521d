"""The ``feedback`` stage (off by default): dense pseudo-relevance feedback, the dense leg run again from the
query vector moved towards the first ranking's best chunks, and the rankings fused again."""

from __future__ import annotations

from services.retriever.engine.ranking.feedback import moved_query
from services.retriever.engine.stages.fuse import fused
from services.retriever.engine.stages.retrieve import dense_leg
from services.retriever.engine.stages.state import EngineParts, Search
from services.retriever.engine.vector.search import vectors_of


async def run(engine: EngineParts, s: Search) -> None:
    config = engine.config
    if not (config.prf_docs > 0 and s.vector is not None and s.mode != "lexical" and s.ranked):
        return
    top = [c for c, _ in s.ranked[: config.prf_docs]]
    moved = moved_query(s.vector, top, await vectors_of(engine.pool, engine.index, top), config.prf_weight)
    if moved is not None:
        s.dense = await dense_leg(engine, s, moved)
        s.ranked = fused(config, s.mode, s.dense, s.lexical)
