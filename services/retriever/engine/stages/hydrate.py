"""The ``hydrate`` stage: the stored rows of the ranked chunks and of the conversation's extra chunks."""

from __future__ import annotations

from services.retriever.engine.hits import hit_rows
from services.retriever.engine.stages.state import EngineParts, Search
from shared.models import PRIORITY_EXCLUDED


async def run(engine: EngineParts, s: Search) -> None:
    known = {c for c, _ in s.ranked}
    extra = [c for c in s.extra_chunk_ids if c not in known]
    s.rows = await hit_rows(engine.pool, [c for c, _ in s.ranked] + extra)
    # Chunks offered again by a conversation skip the filters, but never a document excluded since (0).
    for c in extra:
        if c in s.rows and s.rows[c]["priority"] > PRIORITY_EXCLUDED:
            s.extra.append(c)
