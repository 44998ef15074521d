"""The lexical leg alone on a kept scale store, by the state of the retriever's postings cache (issue 14).

    python bench/lexical_cache.py --root /tmp/scale1m/store [--queries 60] [--cache-mb 256] [--json]

``--root`` is a store kept by ``bench/scale.py --root`` (its PostgreSQL is started and stopped here). The
first ``--queries`` SciFact train claims are timed through ``bm25_rank`` (k = 100, no filter, the default
BM25 parameters) in three states:

* **off**: no cache (every block read from PostgreSQL; its own buffers and the OS cache warm from a first pass);
* **warmed by other questions**: a fresh cache after every *other* train claim ran once, each timed claim then
  seen for the first time: what a running retriever whose traffic shares common terms sees;
* **warm**: the timed claims seen before (what ``bench/scale.py`` measures after its warm-up pass).

Each state prints p50 / p95 / p99 ms, the hit rate of the common terms and what the cache holds.
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
for _p in (ROOT, ROOT / "bench"):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

from scale import database  # noqa: E402

#: The claims bench/scale.py times (its --corpus): SciFact train, from the reference data beside the repository.
QUERIES = ROOT.parent / "shared" / "data" / "beir_scifact" / "queries.train.jsonl"


async def _times(pool: Any, scoring: Any, queries: list[str], cache: Any) -> list[float]:
    from services.retriever.engine.lexical.rank import bm25_rank
    from shared.models import SearchFilters

    out = []
    for query in queries:
        start = time.perf_counter()
        await bm25_rank(pool, query, 100, SearchFilters(), scoring, cache=cache)
        out.append((time.perf_counter() - start) * 1000)
    return out


def _summary(times: list[float], cache: Any = None, before: tuple[int, int] = (0, 0)) -> dict[str, Any]:
    out: dict[str, Any] = {f"p{q}_ms": round(float(np.percentile(times, q)), 1) for q in (50, 95, 99)}
    if cache is not None:
        hits, misses = cache.counts.hits - before[0], cache.counts.misses - before[1]
        out |= {"term_hit_rate": round(hits / max(1, hits + misses), 3), "held_mb": cache.bytes_held >> 20}
    return out


async def measure(url: str, queries: list[str], others: list[str], cache_mb: int) -> dict[str, Any]:
    from services.retriever.engine.lexical.postings import Bm25Scoring, corpus_counts
    from services.retriever.engine.lexical.postings_cache import MIN_POSTINGS, PostingsCache
    from services.retriever.engine.lexical.rank import Bm25Params
    from shared.db import create_pool
    from shared.settings import DatabaseSettings

    pool = await create_pool(DatabaseSettings.model_validate({"EVIDENTIA_DATABASE_URL": url}), run_migrations=False)
    try:
        p = Bm25Params()
        counts = await corpus_counts(pool)
        scoring = Bm25Scoring(p.k1, p.b, p.title_weight, p.section_weight, counts)
        result: dict[str, Any] = {"chunks": counts.chunks, "queries": len(queries), "other_queries": len(others)}
        await _times(pool, scoring, queries, None)  # PostgreSQL's buffers and the OS cache, as in every state
        result["off"] = _summary(
            await _times(pool, scoring, queries, None) + await _times(pool, scoring, queries, None)
        )
        cache = PostingsCache(cache_mb << 20, MIN_POSTINGS)
        await _times(pool, scoring, others, cache)
        before = (cache.counts.hits, cache.counts.misses)
        result["warmed_by_other_questions"] = _summary(await _times(pool, scoring, queries, cache), cache, before)
        before = (cache.counts.hits, cache.counts.misses)
        warm = await _times(pool, scoring, queries, cache) + await _times(pool, scoring, queries, cache)
        result["warm"] = _summary(warm, cache, before)
        return result
    finally:
        await pool.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--root", required=True, help="A store kept by bench/scale.py --root.")
    ap.add_argument("--queries", type=int, default=60, help="Claims timed (the first N, as bench/scale.py).")
    ap.add_argument("--cache-mb", type=int, default=256)
    ap.add_argument("--claims", type=Path, default=QUERIES, help="A BEIR queries file (JSON lines with 'text').")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    claims = [json.loads(line)["text"] for line in args.claims.read_text().splitlines() if line.strip()]
    with database(Path(args.root)) as url:
        result = asyncio.run(measure(url, claims[: args.queries], claims[args.queries :], args.cache_mb))
    if args.json:
        print(json.dumps(result))
    else:
        for state in ("off", "warmed_by_other_questions", "warm"):
            print(f"{state:<26} {result[state]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
