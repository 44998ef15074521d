"""Work per BM25 query on a store built by ``bench/scale.py``: buffers touched and execution time (EXPLAIN
ANALYZE), exact vs top-M, for the first N queries of a BEIR set. Buffers do not depend on the machine's load.

    python bench/scale_profile.py --root /tmp/scale/store --dataset ../shared/data/beir_scifact --limit 20
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
for _p in (ROOT, ROOT / "bench"):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

from load import free_port  # noqa: E402


async def run(url: str, queries: list[str], top_ms: list[int]) -> dict[str, Any]:
    import asyncpg

    from services.retriever.lexical_store import _BM25_SQL
    from shared.settings import RetrievalSettings

    s = RetrievalSettings()
    conn = await asyncpg.connect(url)
    try:
        n, avgdl = await conn.fetchrow("SELECT count(*)::float8, avg(len_text + len_title)::float8 FROM bm25_chunks")
        sql = "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + _BM25_SQL.format(where="NOT d.retracted")
        out: dict[str, Any] = {}
        for top_m in top_ms:
            buffers: list[int] = []
            ms: list[float] = []
            for q in queries:
                plan = json.loads(
                    await conn.fetchval(sql, q, 100, s.bm25_k1, s.bm25_b, 1.0, 0.0, n, avgdl, top_m or None)
                )[0]
                top = plan["Plan"]
                buffers.append(int(top.get("Shared Hit Blocks", 0)) + int(top.get("Shared Read Blocks", 0)))
                ms.append(float(plan["Execution Time"]))
            out[str(top_m)] = {
                "queries": len(queries),
                "buffers_median": int(statistics.median(buffers)),
                "buffers_max": max(buffers),
                "exec_ms_median": round(statistics.median(ms), 1),
                "exec_ms_max": round(max(ms), 1),
            }
            print(f"top_m {top_m or 'exact'}: {out[str(top_m)]}", flush=True)
        return out
    finally:
        await conn.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--root", required=True)
    p.add_argument("--dataset", required=True)
    p.add_argument("--top-m", default="0,1000")
    p.add_argument("--limit", type=int, default=20)
    p.add_argument("--json-out", type=Path, default=None)
    args = p.parse_args(argv)
    qpath = sorted(Path(args.dataset).glob("queries*.jsonl"))[0]
    queries = [json.loads(line)["text"] for line in qpath.read_text(encoding="utf-8").splitlines() if line.strip()]
    queries = [q for q in queries if re.search(r"\w", q)][: args.limit]
    from devstack.postgres import LocalPostgres

    pg = LocalPostgres(Path(args.root) / "postgres", port=free_port())
    pg.start()
    try:
        result = asyncio.run(run(pg.url, queries, [int(m) for m in args.top_m.split(",")]))
    finally:
        pg.stop()
    if args.json_out:
        args.json_out.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
