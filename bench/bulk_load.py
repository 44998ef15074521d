"""Bulk-load rate of the store: chunks/s amortised over a load, the index builds included.

    python bench/bulk_load.py --chunks 100000 [--root DIR] [--batch-docs 2500] [--workers 1] [--phases] [--json]

Builds a fresh store (PostgreSQL on a free port in ``--root``, a temp folder by default; ``shared_buffers`` as
``bench/scale.py`` sizes it) with ``bench/scale.py``'s generated corpus (the same chunk i as any scale store),
through the retriever's bulk path (``services/retriever/engine/bulk.py``): the vector table's ANN index dropped,
every batch's documents, chunks and vectors COPYed in one transaction with the lexical index deferred, then the
deferred postings and the ANN index built at once (``--workers`` parallel maintenance workers), the compaction
and ``ANALYZE`` (``--phases``: the phases one after the other, each one's PostgreSQL CPU counted). The documents
are generated before the clock starts (the embedder's work in production).

Printed: the load's chunks/s, the finish's phases, the CPU a chunk of this server's PostgreSQL and of this
process (the client: COPY encoding, the postings' packing), and the figure the issue asks for, chunks over the whole
(load + finish). Halfway through the load it times a dense search (exact: no ANN index then) and a lexical one,
and checks that a batch written again adds nothing (idempotent replay).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path[:0] = [str(Path(__file__).resolve().parents[1]), str(Path(__file__).resolve().parent)]

import scale  # noqa: E402


def server_cpu_s(backend_pid: int) -> float:
    """CPU seconds used so far by the PostgreSQL server that runs ``backend_pid``: its postmaster's, its
    exited children's (reaped into the postmaster's ``cutime``) and its live children's. Only this server's
    (other servers on the machine are not counted), so the figure holds while other work shares the cores."""
    return postmaster_cpu_s(int(_stat(backend_pid)[1]))


def _stat(pid: int | str) -> list[str]:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def postmaster_cpu_s(postmaster: int) -> float:
    """:func:`server_cpu_s` of the server whose postmaster is ``postmaster``."""
    tick = os.sysconf("SC_CLK_TCK")
    fields = _stat(postmaster)
    total = sum(int(fields[i]) for i in (11, 12, 13, 14))
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            f = _stat(pid)
            if int(f[1]) == postmaster:
                total += sum(int(f[i]) for i in (11, 12, 13, 14))
        except (OSError, IndexError, ValueError):
            continue
    return total / tick


def rows(docs: list[scale.GeneratedDoc]) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]], list[str], np.ndarray]:
    """The bulk path's rows of ``docs``: documents, chunks (``bulk_store``'s column orders), chunk ids, vectors."""
    documents: list[tuple[Any, ...]] = []
    chunks: list[tuple[Any, ...]] = []
    ids: list[str] = []
    for d in docs:
        doc_id = f"pubmed:{d.source_id}"
        text = " ".join(d.chunks)
        documents.append(
            (doc_id, "pubmed", d.source_id, d.source_id, None, None, d.title, text, None, None, d.year,
             d.study_type, d.evidence_level, d.mesh, d.retracted, f"bulk-{d.source_id}")
        )  # fmt: skip
        for o, c in enumerate(d.chunks):
            cid = scale._chunk_id(d.source_id, o)
            chunks.append((cid, doc_id, o, "Abstract", d.title, c, 200, None, None))
            ids.append(cid)
    return documents, chunks, ids, np.concatenate([d.vectors for d in docs])


def random_basis(source: scale.Source, count: int, dim: int) -> tuple[np.ndarray, str]:
    """Seeded random unit vectors of ``dim`` for the first ``count`` abstracts, and the model name they are
    stored under: no encoder is loaded. The chunks still cluster around one vector per abstract, as with real
    ones; the store's work does not depend on the model."""
    rng = np.random.default_rng(34)
    basis = rng.normal(size=(min(count, len(source.abstracts)), dim))
    return (basis / np.linalg.norm(basis, axis=1, keepdims=True)).astype(np.float32), f"random-basis-{dim}"


async def finish_by_phase(
    pool: Any, conn: Any, index: Any, db: Any, args: argparse.Namespace, chunks: int
) -> dict[str, dict[str, float]]:
    """The finish's phases one after the other (``finish_bulk_load`` runs the two builds at once), each timed
    and its PostgreSQL CPU counted: what each costs a chunk."""
    from services.retriever.engine import bulk as bulk_store
    from services.retriever.engine.jobs import ANN_MAINTENANCE_LOCK
    from services.retriever.engine.lexical.compaction import compact

    backend = int(await conn.fetchval("SELECT pg_backend_pid()"))
    phases: dict[str, Callable[[], Awaitable[Any]]] = {
        "postings": lambda: bulk_store.index_deferred_chunks(pool),
        "ann_build": lambda: bulk_store.build_ann_index(
            conn, index, db, workers=args.workers, maintenance_work_mem=args.maintenance_work_mem
        ),
        "compaction": lambda: compact(pool),
        "analyze": lambda: conn.execute(
            f"ANALYZE documents; ANALYZE chunks; ANALYZE bm25_chunks; ANALYZE {index.table_name}"
        ),
    }
    out: dict[str, dict[str, float]] = {}
    for name, work in phases.items():
        cpu, mine, t = server_cpu_s(backend), time.process_time(), time.perf_counter()
        await work()
        wall, used, client = time.perf_counter() - t, server_cpu_s(backend) - cpu, time.process_time() - mine
        out[name] = {
            "s": round(wall, 1),
            "postgres_cpu_ms_per_chunk": round(used * 1000 / max(chunks, 1), 3),
            "client_cpu_ms_per_chunk": round(client * 1000 / max(chunks, 1), 3),
        }
        print(f"  {name}: {out[name]}", flush=True)
    await conn.execute("SELECT pg_advisory_unlock($1, $2)", *ANN_MAINTENANCE_LOCK)
    return out


async def run(url: str, gen: scale.Generator, model: str, dim: int, args: argparse.Namespace) -> dict[str, Any]:
    from services.retriever.engine import bulk as bulk_store
    from services.retriever.engine.lexical.postings import corpus_counts
    from services.retriever.engine.vector.search import nearest_chunks
    from services.retriever.engine.vector.tables import ensure_active_index
    from shared.db import create_pool
    from shared.models import SearchFilters
    from shared.settings import DatabaseSettings

    db = DatabaseSettings.model_validate({"EVIDENTIA_DATABASE_URL": url, "statement_timeout_s": 0})
    pool = await create_pool(db)
    try:
        index = await ensure_active_index(pool, model, dim, db)
        docs_n = args.chunks // 2
        t = time.perf_counter()
        batches = []
        for i in range(0, docs_n, args.batch_docs):
            batches.append(rows([gen.doc(j) for j in range(i, min(docs_n, i + args.batch_docs))]))
        print(f"generated {docs_n} documents in {time.perf_counter() - t:.0f}s (not timed below)", flush=True)
        out: dict[str, Any] = {"chunks": args.chunks, "batch_docs": args.batch_docs, "workers": args.workers}
        backend = int(await pool.fetchval("SELECT pg_backend_pid()"))
        cpu0, mine0, t0 = server_cpu_s(backend), time.process_time(), time.perf_counter()
        async with bulk_store.bulk_load(pool, index) as conn:
            written = 0
            for k, (documents, chunks, ids, vectors) in enumerate(batches):
                w = await bulk_store.write_batch(pool, index, documents, chunks, (ids, vectors))
                written += w.chunks
                if k == len(batches) // 2:
                    # Mid-load: a replayed batch adds nothing; searches answer (dense exactly).
                    again = await bulk_store.write_batch(pool, index, documents, chunks, (ids, vectors))
                    out["replayed_batch_written"] = again.__dict__
                    t = time.perf_counter()
                    hits = await nearest_chunks(pool, index, vectors[0], 10, SearchFilters(), 100)
                    out["mid_load_dense_exact_ms"] = round((time.perf_counter() - t) * 1000, 1)
                    out["mid_load_dense_top_hit_is_itself"] = bool(hits and hits[0][0] == ids[0])
                    status = await bulk_store.bulk_load_status(pool, index)
                    out["mid_load_status"] = {**status.__dict__, "searches": status.searches}
                    out["mid_load_chunks"] = written
                    print(f"  mid-load: {out['mid_load_status']}", flush=True)
                if (k + 1) % max(1, len(batches) // 10) == 0:
                    print(f"  loaded {written} chunks ({time.perf_counter() - t0:.0f}s)", flush=True)
            load_s, cpu1, mine1 = time.perf_counter() - t0, server_cpu_s(backend), time.process_time()
            print(f"load: {written} chunks in {load_s:.1f}s = {written / load_s:.0f}/s; finishing", flush=True)
            if args.phases:
                out["finish_phases"] = await finish_by_phase(pool, conn, index, db, args, written)
            else:
                finished = await bulk_store.finish_bulk_load(
                    pool, conn, index, db, workers=args.workers, maintenance_work_mem=args.maintenance_work_mem
                )
                out["finish"] = {k: round(v, 1) if isinstance(v, float) else v for k, v in finished.__dict__.items()}
        total_s, cpu2, mine2 = time.perf_counter() - t0, server_cpu_s(backend), time.process_time()
        status = await bulk_store.bulk_load_status(pool, index)
        counts = await corpus_counts(pool)
        out.update(
            {
                "chunks_written": written,
                "load_s": round(load_s, 1),
                "load_chunks_per_s": round(written / load_s, 1),
                "total_s": round(total_s, 1),
                "postgres_cpu_ms_per_chunk": {
                    "load": round((cpu1 - cpu0) * 1000 / max(written, 1), 3),
                    "finish": round((cpu2 - cpu1) * 1000 / max(written, 1), 3),
                },
                "client_cpu_ms_per_chunk": {
                    "load": round((mine1 - mine0) * 1000 / max(written, 1), 3),
                    "finish": round((mine2 - mine1) * 1000 / max(written, 1), 3),
                },
                "amortised_chunks_per_s": round(written / total_s, 1),
                "after": {**status.__dict__, "searches": status.searches, "bm25_chunks": counts.chunks},
                "database_bytes": int(await pool.fetchval("SELECT pg_database_size(current_database())")),
            }
        )
        return out
    finally:
        await pool.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--chunks", type=int, default=100_000)
    p.add_argument("--root", default=None, help="Where PostgreSQL's data goes (default: a temp folder, removed).")
    p.add_argument("--corpus", default="", help="As bench/scale.py's --corpus ('' for the bundled sample).")
    p.add_argument("--real-vectors", type=int, default=500)
    p.add_argument("--cache-dir", default=str(Path.home() / ".cache" / "evidentia" / "scale"))
    p.add_argument(
        "--random-basis", type=int, default=0, help="DIM: seeded random abstract vectors of DIM, no encoder."
    )
    p.add_argument("--batch-docs", type=int, default=2500, help="Documents (2 chunks each) a bulk transaction.")
    p.add_argument("--workers", type=int, default=1, help="Parallel maintenance workers of the ANN build.")
    p.add_argument("--maintenance-work-mem", default="2GB")
    p.add_argument(
        "--phases", action="store_true", help="Run the finish's phases one after the other, each one's CPU counted."
    )
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    source = scale.load_source(Path(args.corpus) if args.corpus else None)
    if args.random_basis:
        basis, model = random_basis(source, args.real_vectors, args.random_basis)
    else:
        basis, model = scale.real_basis(source, min(args.real_vectors, len(source.abstracts)), Path(args.cache_dir))
    gen = scale.Generator(source, basis)
    settings = {"shared_buffers": scale.shared_buffers(args.chunks), "max_wal_size": "8GB"}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(args.root or tmp)
        with scale.database(root, settings) as url:
            out = asyncio.run(run(url, gen, model, basis.shape[1], args))
    out["postgres_settings"] = settings
    out["model"] = model
    print(json.dumps(out, indent=2 if args.json else None), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
