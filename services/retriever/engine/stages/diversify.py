"""The ``diversify`` stage: maximal marginal relevance over the head's vectors, when the request asks for it."""

from __future__ import annotations

import numpy as np

from services.retriever.engine.ranking.mmr import mmr_select
from services.retriever.engine.stages.state import EngineParts, Search
from services.retriever.engine.vector.search import vectors_of


async def run(engine: EngineParts, s: Search) -> None:
    if not (s.mmr and len(s.head) > 1):
        return
    vectors = await vectors_of(engine.pool, engine.index, [c for c, _ in s.head])
    if len(vectors) == len(s.head):
        picked = mmr_select(
            [score for _, score in s.head],
            np.stack([vectors[c] for c, _ in s.head]),
            min(s.top_n, len(s.head)),
            s.mmr_lambda,
        )
        s.head = [s.head[i] for i in picked]
