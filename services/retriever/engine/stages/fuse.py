"""The ``fuse`` stage: the legs' rankings as one (weighted reciprocal rank or convex fusion in hybrid modes;
a single leg's ranking as it is)."""

from __future__ import annotations

from services.retriever.engine.config import SearchConfig
from services.retriever.engine.scored import Scored
from services.retriever.engine.stages.state import EngineParts, Ranked, Search


def fused(config: SearchConfig, mode: str, dense: list[Scored], lexical: list[Scored]) -> Ranked:
    """The ranking of ``mode`` from the legs' rankings."""
    if mode == "dense":
        return [(x.chunk_id, x.score) for x in dense]
    if mode == "lexical":
        return [(x.chunk_id, x.score) for x in lexical]
    if config.convex is not None:
        return config.convex.fuse([[(x.chunk_id, x.score) for x in dense], [(x.chunk_id, x.score) for x in lexical]])
    return config.fusion.fuse([[x.chunk_id for x in dense], [x.chunk_id for x in lexical]])


async def run(engine: EngineParts, s: Search) -> None:
    s.ranked = fused(engine.config, s.mode, s.dense, s.lexical)
