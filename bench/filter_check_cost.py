"""What checking candidates against the filters costs the lexical leg: the leg's check statement (each candidate
key's chunk and document rows, the default filters) for N random chunk keys, first with rows not read before
(random keys: on a store larger than memory, mostly reads from disk or the OS cache) and then the same keys
again (in PostgreSQL's buffers). Sizes the first check pass (``next_pass``: ``k`` and a margin under the
default filters, 256 before).

    python bench/filter_check_cost.py --database-url postgresql://... [--sizes 20,40,256] [--repeats 20]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


async def check_cost(url: str, sizes: list[int], repeats: int, seed: int) -> dict[str, dict[str, float]]:
    """Per size: mean and p95 ms of the check of that many random keys not checked before, and the mean of the
    same keys checked again."""
    from services.retriever.engine.filters.fields import filter_clause
    from services.retriever.engine.lexical.rank import _RESOLVE_SQL
    from shared.db import create_pool
    from shared.models import SearchFilters
    from shared.settings import DatabaseSettings

    pool = await create_pool(DatabaseSettings.model_validate({"EVIDENTIA_DATABASE_URL": url}))
    clause = filter_clause(SearchFilters())
    sql = _RESOLVE_SQL.format(where=clause.where[2])
    rng = np.random.default_rng(seed)
    out: dict[str, dict[str, float]] = {}
    try:
        chunks = int(await pool.fetchval("SELECT count(*) FROM bm25_chunks"))
        async with pool.acquire() as conn:
            for size in sizes:
                first, again = [], []
                for _ in range(repeats):
                    keys = sorted(rng.choice(chunks, size, replace=False).tolist())
                    for times in (first, again):
                        t0 = time.perf_counter()
                        await conn.fetch(sql, keys, *clause.params)
                        times.append(time.perf_counter() - t0)
                out[str(size)] = {
                    "first_mean_ms": round(1000 * float(np.mean(first)), 2),
                    "first_p95_ms": round(1000 * float(np.percentile(first, 95)), 2),
                    "again_mean_ms": round(1000 * float(np.mean(again)), 2),
                }
                print(f"{size:>5} keys: {out[str(size)]}", flush=True)
        out["store"] = {"chunks": chunks}
    finally:
        await pool.close()
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--sizes", default="20,40,256")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    a = parser.parse_args()
    result = asyncio.run(check_cost(a.database_url, [int(s) for s in a.sizes.split(",")], a.repeats, a.seed))
    print(json.dumps(result, indent=2))
