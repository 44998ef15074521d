"""Lexical searches under filters on a kept store, query by query: p50, p95, the slowest and the searches slower
than three times the median, with the doc values as the retriever holds them (read whole first, timed). Finds
the filter whose checks grow with the corpus (a MeSH "Humans" filter took 1,625 ms p95 at 3x10^6 chunks in
``bench/scale.py``'s filtered rows while its median was 32 ms).

    python bench/filtered_searches.py (--database-url postgresql://... | --root STORE) \
        [--filter '{"mesh": ["Humans"]}' ...] [--queries 60] [--rounds 2]

``--root``: a store ``bench/scale.py --root`` kept (its PostgreSQL started here and stopped after).

The queries are the bundled PubMedQA sample's titles, as in ``bench/scale.py``; the filters go through the
search pipeline's own stages (a MeSH filter's descendants looked up first). ``EVIDENTIA_RETRIEVAL_*`` settings
apply (the postings cache: ``EVIDENTIA_RETRIEVAL_BM25_CACHE_MB``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
for path in (ROOT, ROOT / "bench"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

DEFAULT_FILTERS = ['{"mesh": ["Humans"]}', '{"year_from": 2015, "year_to": 2016}']


async def filtered_searches(url: str, specs: list[dict[str, Any]], queries: int, rounds: int) -> dict[str, Any]:
    from scale import doc_values, load_source

    from services.retriever.engine import CorpusStats, SearchEngine
    from services.retriever.engine.lexical.postings_cache import PostingsCache
    from services.retriever.engine.vector.tables import active_index
    from shared.db import create_pool
    from shared.models import SearchFilters
    from shared.settings import DatabaseSettings, Settings

    pool = await create_pool(DatabaseSettings.model_validate({"EVIDENTIA_DATABASE_URL": url}))
    out: dict[str, Any] = {"chunks": int(await pool.fetchval("SELECT count(*) FROM bm25_chunks")), "filters": {}}
    try:
        settings = Settings()
        index = await active_index(pool)
        if index is None:
            raise SystemExit("the store has no active vector index (the engine is built around one)")
        follower, out["doc_values"] = await doc_values(pool)
        searcher = SearchEngine.from_settings(
            pool,
            index,
            settings.retrieval,
            stats=CorpusStats(),
            postings_cache=PostingsCache.from_settings(settings.retrieval),
            doc_values=follower,
        )
        texts = load_source(None).queries[:queries]
        for spec in specs:
            filters = SearchFilters.model_validate(spec)

            async def timed(query: str, filters: SearchFilters = filters) -> float:
                started = time.perf_counter()
                await searcher.search(query, None, mode="lexical", top_k=20, top_n=10, filters=filters)
                return 1000 * (time.perf_counter() - started)

            for query in texts:  # once first: the postings and rows the filter reads come into memory
                await timed(query)
            rows = []
            for _ in range(rounds):
                ms = np.array([await timed(query) for query in texts])
                median = float(np.median(ms))
                rows.append(
                    {
                        "p50_ms": round(median, 1),
                        "p95_ms": round(float(np.percentile(ms, 95)), 1),
                        "max_ms": round(float(ms.max()), 1),
                        "slow": [texts[i] for i in np.flatnonzero(ms > 3 * median)],
                    }
                )
                print(f"{json.dumps(spec)}: {rows[-1]}", flush=True)
            out["filters"][json.dumps(spec)] = rows
    finally:
        await pool.close()
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--database-url")
    where.add_argument("--root", help="A store kept by bench/scale.py --root.")
    parser.add_argument("--filter", action="append", help="A SearchFilters JSON object (repeatable).")
    parser.add_argument("--queries", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=2)
    a = parser.parse_args()
    specs = [json.loads(s) for s in (a.filter or DEFAULT_FILTERS)]
    if a.root:
        from scale import database

        with database(Path(a.root)) as url:
            result = asyncio.run(filtered_searches(url, specs, a.queries, a.rounds))
    else:
        result = asyncio.run(filtered_searches(a.database_url, specs, a.queries, a.rounds))
    print(json.dumps(result, indent=2))
