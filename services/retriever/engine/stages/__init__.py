"""The stages of a search, one module each, in the order they run (:data:`STAGES`): each takes the engine's
parts and the search's state (:mod:`.state`), reads what the stages before it wrote and writes its own part.

1. ``filters``: the filters resolved once into a plan the legs only read (MeSH descendants, the clause, the
   corpus counts, a restrictive filter's chunks when few pass it, the doc values when they will drop chunks);
2. ``retrieve``: the dense (pgvector ANN, iterative scans under filters) and/or lexical (exact BM25) legs at
   once, each ``depth`` deep;
3. ``fuse``: weighted reciprocal rank (or convex) fusion in hybrid modes;
4. ``feedback``: dense pseudo-relevance feedback (off by default);
5. ``hydrate``: the ranked chunks' stored rows (and the conversation's extra chunks);
6. ``blend``: the document-priority boost, the evidence/recency blend, at most ``max_chunks_per_document``
   passages of one paper;
7. ``rerank``: in ``hybrid+rerank`` the first ``top_k`` reranked;
8. ``diversify``: MMR over the candidates' vectors when asked for;

then :func:`.hits.search_hits` turns the state into the hits returned.
"""

from collections.abc import Awaitable, Callable

from services.retriever.engine.stages import blend, diversify, feedback, filters, fuse, hydrate, rerank, retrieve
from services.retriever.engine.stages.state import EngineParts, Search

#: A stage: each module's ``run``.
Stage = Callable[[EngineParts, Search], Awaitable[None]]

_MODULES = (filters, retrieve, fuse, feedback, hydrate, blend, rerank, diversify)

#: The stages' names, in order (each its module's).
STAGES: tuple[str, ...] = tuple(m.__name__.rpartition(".")[2] for m in _MODULES)

#: The stages, in order.
RUNS: tuple[Stage, ...] = tuple(m.run for m in _MODULES)

__all__ = ["RUNS", "STAGES", "Stage"]
