"""The walk of one search through the retriever's modules: which project modules it enters, in order, and how
often it comes back to one it had left (``docs/architecture.md``, "The walk of a search").

    nice -n 5 .venv/bin/python -m bench.search_walk

Method: a small SciFact corpus is stored and indexed as ``evaluation.retrieval`` does (the hashing embedder of
:mod:`bench.ranking_identity`); then one hybrid search with a restrictive filter (``sources``, a minimum
priority, at most one passage a paper) runs from the retriever's request handler (``_search`` in
``services/retriever/handlers.py``, what a ``RetrievalRequest`` from the gateway reaches) to its last SQL
statement under ``sys.setprofile``. Every *new* Python frame whose code lives in ``services/`` or ``shared/``
is a step, named by its module; consecutive steps in one module are one stop. A *return* is a stop in a module
the walk had already left. Resumptions of a suspended coroutine are not new frames and do not count.

Two orders of the same steps are counted. *As run*: in the order the frames start, where the two legs of a
hybrid search, running at once as two tasks, interleave (each time one waits on its SQL the other goes on).
*By task*: each task's steps together, a leg's at the point where it started, the legs one after the other,
as a reader follows the code; the interleaving of concurrent legs is the scheduler's, not the code's.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Callable
from pathlib import Path
from types import FrameType, SimpleNamespace
from typing import Any

from bench.ranking_identity import HashingEmbedder


def module_of(filename: str, roots: tuple[Path, ...]) -> str | None:
    """``services.retriever.handlers`` for a file of the project (under ``services/`` or ``shared/``), else None."""
    path = Path(filename)
    for root in roots:
        try:
            rel = path.relative_to(root)
        except ValueError:
            continue
        if rel.parts and rel.parts[0] in ("services", "shared"):
            return ".".join(rel.with_suffix("").parts).removesuffix(".__init__")
    return None


def walk(stops: list[str]) -> tuple[list[str], int]:
    """Consecutive steps in one module collapsed into stops, and how many stops return to a module left before."""
    collapsed: list[str] = []
    for m in stops:
        if not collapsed or collapsed[-1] != m:
            collapsed.append(m)
    seen: set[str] = set()
    returns = 0
    for i, m in enumerate(collapsed):
        if m in seen and collapsed[i - 1] != m:
            returns += 1
        seen.add(m)
    return collapsed, returns


def by_task(steps: list[tuple[int, str]]) -> list[str]:
    """``(task, module)`` steps with each task's together: the first task's in order, another task's all at the
    point of its first step."""
    if not steps:
        return []
    main = steps[0][0]
    of_task: dict[int, list[str]] = {}
    for task, module in steps:
        of_task.setdefault(task, []).append(module)
    out: list[str] = []
    placed: set[int] = set()
    for task, module in steps:
        if task == main:
            out.append(module)
        elif task not in placed:
            placed.add(task)
            out.extend(of_task[task])
    return out


def tracer(roots: tuple[Path, ...], steps: list[tuple[int, str]]) -> Callable[[FrameType, str, Any], None]:
    frames: list[FrameType] = []  # held so that no id is reused while tracing
    seen: set[int] = set()

    def profile(frame: FrameType, event: str, _arg: Any) -> None:
        if event != "call" or id(frame) in seen:
            return
        seen.add(id(frame))
        frames.append(frame)
        module = module_of(frame.f_code.co_filename, roots)
        if module is not None:
            try:
                task = id(asyncio.current_task())
            except RuntimeError:  # no running loop (a thread)
                task = 0
            steps.append((task, module))

    return profile


async def _searcher(pool: Any, index: Any, settings: Any) -> Any:
    try:
        from services.retriever.engine import SearchEngine  # type: ignore[attr-defined]

        return SearchEngine.from_settings(pool, index, settings.retrieval, ef_search=settings.database.hnsw_ef_search)
    except ImportError:
        from services.retriever.search import HybridSearcher  # type: ignore[import-not-found]

        return HybridSearcher.from_settings(pool, index, settings.retrieval, ef_search=settings.database.hnsw_ef_search)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", default="../shared/data/beir_scifact")
    p.add_argument("--documents", type=int, default=200)
    args = p.parse_args(argv)

    import shared.embedding
    from evaluation import retrieval
    from services.retriever import handlers
    from shared.events import RetrievalRequest
    from shared.models import SearchFilters
    from shared.settings import Settings

    full = retrieval.load_beir(args.dataset, "train")
    keep = list(full.corpus)[: args.documents]
    ds = retrieval.Dataset("walk", {d: full.corpus[d] for d in keep}, {}, {})
    embedder = HashingEmbedder()
    shared.embedding.get_embedder = lambda _settings=None: embedder  # type: ignore[assignment,return-value]
    settings = Settings()
    roots = tuple({Path(handlers.__file__).resolve().parents[2], Path(shared.__file__).resolve().parents[1]})
    request = RetrievalRequest(
        query="vitamin D deficiency and bone density",
        mode="hybrid",
        top_k=20,
        top_n=5,
        filters=SearchFilters(sources=["pubmed"], min_priority=1, max_chunks_per_document=1),
    )

    async def run() -> list[tuple[int, str]]:
        config = retrieval.EvalConfig(modes=("hybrid",), cache_dir=None, concurrency=2)
        async with retrieval.indexed_store(ds, settings, config) as store:
            searcher = await _searcher(store.pool, store.index, settings)

            async def current_searcher() -> Any:
                return searcher

            state: Any = SimpleNamespace(  # what _search reads of a RetrieverState
                settings=settings, embedder=embedder, index=store.index, current_searcher=current_searcher
            )
            await handlers._search(state, request)  # warm: the corpus counts are read once
            steps: list[tuple[int, str]] = []
            sys.setprofile(tracer(roots, steps))
            try:
                await handlers._search(state, request)
            finally:
                sys.setprofile(None)
            return steps

    steps = asyncio.run(run())
    for name, order in (("as run", [m for _, m in steps]), ("by task", by_task(steps))):
        collapsed, returns = walk(order)
        print(f"{name}: stops {len(collapsed)}, modules {len(set(collapsed))}, returns {returns}")
        print(" -> ".join(m.removeprefix("services.retriever.") for m in collapsed))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
