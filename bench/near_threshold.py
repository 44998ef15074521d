"""How many chunks score near a question's k-th best lexical score, by corpus size (issue #38's growth).

    python bench/near_threshold.py --root /work/store1m --root /work/store [--queries 60] [--k 20] [--json]

Each ``--root`` is a store kept by ``bench/scale.py --root`` (its PostgreSQL started and stopped here). For the
first ``--queries`` questions of the benchmark's source (``bench/scale.py``'s), every chunk's exact BM25F score
(every posting of the question's terms, the default parameters, no filter), and the number of chunks scoring at
least 100, 99, 95, 90 and 80 % of the ``k``-th best score: median and p95 over the questions, and the chunks
that hold a question term at all.

Why: an exact top-``k`` search that skips by score bounds (MaxScore, WAND and their block-max forms) must look
at every chunk whose bound reaches the ``k``-th best score; a chunk's bound is its known contributions plus
the most the terms not yet looked up could add. Where bounds are loose by ``x`` %, the chunks within ``x`` % of
the ``k``-th best score are a floor on the work: whether that set grows with the corpus decides whether the
search can grow slower than it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
for _p in (ROOT, ROOT / "bench"):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

from scale import database, load_source  # noqa: E402

#: The shares of the k-th best score counted.
SHARES = (1.0, 0.99, 0.95, 0.9, 0.8)


async def near_counts(url: str, queries: list[str], k: int) -> dict[str, Any]:
    """For each query, the chunks at or above each share of its ``k``-th best score, and those it matches."""
    from services.retriever.engine.lexical.postings import Bm25Scoring, bm25_scores, corpus_counts, term_postings
    from services.retriever.engine.lexical.rank import Bm25Params
    from shared.db import create_pool
    from shared.settings import DatabaseSettings

    pool = await create_pool(DatabaseSettings.model_validate({"EVIDENTIA_DATABASE_URL": url}), run_migrations=False)
    try:
        p = Bm25Params()
        counts = await corpus_counts(pool)
        scoring = Bm25Scoring(p.k1, p.b, p.title_weight, p.section_weight, counts)
        dead = np.zeros(0, dtype=np.int64)
        rows = []
        for query in queries:
            scores = bm25_scores(await term_postings(pool, query), scoring, dead)
            if np.count_nonzero(scores) < k:
                continue
            kth = float(np.partition(scores, len(scores) - k)[len(scores) - k])
            rows.append([int(np.count_nonzero(scores >= kth * s)) for s in SHARES] + [int(np.count_nonzero(scores))])
    finally:
        await pool.close()
    table = np.array(rows, dtype=np.float64)
    names = [f">={round(100 * s)}%" for s in SHARES] + ["matched"]
    return {
        "chunks": counts.chunks,
        "queries": len(rows),
        "median": dict(zip(names, np.median(table, axis=0).round(1).tolist(), strict=True)),
        "p95": dict(zip(names, np.percentile(table, 95, axis=0).round(1).tolist(), strict=True)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", type=Path, action="append", required=True, help="a kept store (repeatable)")
    parser.add_argument("--queries", type=int, default=60)
    parser.add_argument("--k", type=int, default=20)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    queries = load_source(None).queries[: args.queries]
    results = []
    for root in args.root:
        with database(root) as url:
            results.append(asyncio.run(near_counts(url, queries, args.k)))
    if args.json:
        print(json.dumps(results, indent=2))
        return
    for r in results:
        print(f"{r['chunks']:,} chunks, {r['queries']} questions, k = {args.k}: chunks by share of the k-th best")
        for stat in ("median", "p95"):
            print(f"  {stat:6} " + "  ".join(f"{name} {value:,.0f}" for name, value in r[stat].items()))


if __name__ == "__main__":
    main()
