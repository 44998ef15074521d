"""How fast the retriever stores vectors into an existing store's HNSW graph, by statements at once (issue 14).

Against a store that ``bench/scale.py --root DIR`` built (reused, not grown): documents past the generated ones
are stored (documents + chunks, timed apart as "store"), then their vectors through the retriever's
``upsert_vectors`` in batches of ``--batch`` with ``concurrency`` statements at once, each with the CPU time
PostgreSQL spent on it a chunk (every PostgreSQL process on this machine); one line per step of
``--plan``, in order (the graph warms as the steps run: give the same step twice to see it). Everything it
wrote is deleted at the end (which leaves dead tuples for the next VACUUM of the HNSW index).

    python bench/vector_writes.py --root /tmp/scale1m/store --plan 1,1,1,2,2 --docs 1024
    python bench/vector_writes.py --root /tmp/scale1m/store --shared-buffers 128MB --plan 1,2,1,2,4
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path
from typing import Any

sys.path[:0] = [str(Path(__file__).resolve().parents[1]), str(Path(__file__).resolve().parent)]

import scale  # noqa: E402
from vector_index import postgres_cpu_s  # noqa: E402


async def run(url: str, gen: Any, model: str, dim: int, args: argparse.Namespace) -> None:
    from services.retriever.engine.vector.tables import ensure_active_index
    from shared.db import create_pool
    from shared.settings import DatabaseSettings

    db = DatabaseSettings.model_validate(
        {"EVIDENTIA_DATABASE_URL": url, "EVIDENTIA_DATABASE_POOL_MAX": "20", "statement_timeout_s": 0}
    )
    pool = await create_pool(db)
    index = await ensure_active_index(pool, model, dim, db)
    first = 5_000_000  # past the generated documents and scale.py's own write paths
    written: list[str] = []
    try:
        for step, concurrency in enumerate(args.plan_list):
            docs = [gen.doc(i) for i in range(first, first + args.docs)]
            first += args.docs
            written += [d.source_id for d in docs]
            cpu0, t = postgres_cpu_s(), time.perf_counter()
            for i in range(0, len(docs), 256):
                await scale.store_chunks(pool, docs[i : i + 256])
            store_s, cpu1 = time.perf_counter() - t, postgres_cpu_s()
            t = time.perf_counter()
            await scale.store_vectors(pool, index, docs, concurrency, args.batch)
            vector_s, cpu2 = time.perf_counter() - t, postgres_cpu_s()
            n = sum(len(d.chunks) for d in docs)
            print(
                f"step {step + 1}: concurrency {concurrency}, {n} chunks: store {n / store_s:.0f}/s "
                f"({(cpu1 - cpu0) * 1000 / n:.2f} ms of PostgreSQL CPU a chunk), vectors {n / vector_s:.0f}/s "
                f"({(cpu2 - cpu1) * 1000 / n:.2f} ms)",
                flush=True,
            )
    finally:
        await pool.execute("DELETE FROM documents WHERE source_id = ANY($1::text[])", written)
        await pool.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--root", required=True, help="A store built by bench/scale.py --root.")
    p.add_argument(
        "--corpus",
        default=str(Path(__file__).resolve().parents[2] / "shared/data/beir_scifact"),
        help="The corpus the store was built from ('' for the bundled one).",
    )
    p.add_argument("--real-vectors", type=int, default=400)
    p.add_argument("--cache-dir", default=str(Path.home() / ".cache" / "evidentia" / "scale"))
    p.add_argument("--plan", default="1,1,1,2,2", help="Statements at once, one step each, in order.")
    p.add_argument("--docs", type=int, default=1024, help="Documents (2 chunks each) a step.")
    p.add_argument("--batch", type=int, default=512, help="Vectors a call (the retriever's consumed batch).")
    p.add_argument("--store-chunks", type=int, default=1_000_000, help="The store's size, for shared_buffers.")
    p.add_argument("--shared-buffers", default=None, help="PostgreSQL shared_buffers (default: as scale.py's).")
    args = p.parse_args(argv)
    args.plan_list = [int(x) for x in args.plan.split(",")]
    source = scale.load_source(Path(args.corpus) if args.corpus else None)
    basis, model = scale.real_basis(source, min(args.real_vectors, len(source.abstracts)), Path(args.cache_dir))
    gen = scale.Generator(source, basis)
    settings = {"shared_buffers": scale.shared_buffers(args.store_chunks, args.shared_buffers)}
    print(f"PostgreSQL: {settings}", flush=True)
    with scale.database(Path(args.root), settings) as url:
        asyncio.run(run(url, gen, model, basis.shape[1], args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
