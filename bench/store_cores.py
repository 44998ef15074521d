"""The store's live write path with PostgreSQL held to k cores: chunks/s and PostgreSQL CPU a chunk, by k.

    python bench/store_cores.py --root /tmp/store_cores --cores 4,8,16 --chunks 200000 --json-out OUT/x.json

What it does, in order (each phase guarded: a failure is printed and recorded, the next phase still runs where
it can; the JSON is rewritten after every phase, so a run cut short still leaves what it measured):

1. **Bulk build, on every core.** A fresh PostgreSQL (``bench/scale.py``'s ``database``) gets ``bench/scale.py``'s
   generated corpus through the retriever's bulk path (``bench/bulk_load.py``'s rows; the ANN index dropped,
   COPY batches with the lexical postings deferred) until ``--chunks`` or ``--load-s`` seconds of loading, then
   the finish (postings and the HNSW graph at once, ``--build-workers`` parallel maintenance workers), each
   timed. Vectors come from seeded random abstract vectors (``bench/bulk_load.py``'s ``random_basis``): no
   encoder is needed. The graph is then read into ``shared_buffers`` (``pg_prewarm``).
2. **For each k of --cores**: every process of that server (postmaster and children; backends started later
   inherit the postmaster's mask) is pinned to cores 0..k-1 and ``max_parallel_workers`` set to k; then, for each
   multiplier m of ``--statements``, S = m*k statements at once run the production live path in two timed phases:
   *store*: S writers each calling the parser's ``store_document`` (one document a transaction, the lexical
   index kept by the store's triggers) for ``--step-s`` seconds; *vectors*: the chunks just stored go through
   the retriever's ``upsert_vectors`` in batches of ``--batch`` with its default ``vector_write_concurrency``
   statements a call, S/that many calls at once, until done or ``--vector-s`` seconds. Each phase: chunks/s,
   PostgreSQL CPU ms a chunk (this server's processes only), the clients' CPU and the store's size after it.

The clients are ``--client-procs`` forked processes (their own event loop and pool each) pinned to the cores
PostgreSQL is not given (all cores when k is all of them), so Python is not what limits the rate; their CPU
a phase is printed beside PostgreSQL's so that can be checked. Rows written stay in the store (it grows as the
steps run: the size is printed with each).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import multiprocessing as mp
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable, Generator, Iterator
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import numpy as np

sys.path[:0] = [str(Path(__file__).resolve().parents[1]), str(Path(__file__).resolve().parent)]

import scale  # noqa: E402
from bulk_load import postmaster_cpu_s, random_basis, rows  # noqa: E402

T0 = time.time()
STEP_DOCS = 1_000_000  # document ids a step may use (client c of step s starts at FIRST_LIVE + s*STEP_DOCS + ...)
FIRST_LIVE = 10_000_000  # past the bulk-built documents
FIRST_RESERVE = 50_000_000  # the reserve's documents (past the live ones)


def say(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S', time.gmtime())} +{time.time() - T0:6.1f}s] {msg}", flush=True)


def guarded(result: dict[str, Any], name: str, work: Callable[[], Any]) -> Any:
    """``work()``; on failure the error is printed and stored under ``result[name + '_error']`` (None back)."""
    try:
        return work()
    except Exception as exc:  # one phase's failure must not lose the others' figures
        result[f"{name}_error"] = f"{type(exc).__name__}: {exc}"
        say(f"{name} FAILED: {result[name + '_error']}\n{traceback.format_exc()}")
        return None


# ----------------------------------------------------------------------------------------- the server


async def _postmaster(url: str) -> int:
    """The pid of the server's postmaster (read while one of its backends is alive)."""
    import asyncpg

    conn = await asyncpg.connect(url)
    try:
        return _ppid(int(await conn.fetchval("SELECT pg_backend_pid()")))
    finally:
        await conn.close()


def _ppid(pid: int | str) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def server_pids(postmaster: int) -> list[int]:
    """The postmaster and its live children."""
    out = [postmaster]
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if _ppid(pid) == postmaster:
                out.append(int(pid))
        except (OSError, IndexError, ValueError):
            continue
    return out


def pin_server(postmaster: int, cores: set[int]) -> int:
    """Every process of the server to ``cores`` (backends forked later inherit the postmaster's mask)."""
    pinned = 0
    for pid in server_pids(postmaster):
        try:
            os.sched_setaffinity(pid, cores)
            pinned += 1
        except OSError:
            continue
    return pinned


# ----------------------------------------------------------------------------------------- the build


_GEN: scale.Generator | None = None  # set before the generating processes fork


def _rows_of(span: tuple[int, int]) -> tuple[Any, ...]:
    assert _GEN is not None
    return rows([_GEN.doc(j) for j in range(*span)])


def generated(
    gen: scale.Generator, first: int, docs: int, batch_docs: int, procs: int
) -> Generator[tuple[Any, ...], None, None]:
    """``bench/bulk_load.py``'s rows of documents ``first``.. ``first + docs``, ``batch_docs`` a batch, in order,
    generated by ``procs`` forked processes (the documents are what the embedder hands over in production)."""
    global _GEN
    _GEN = gen
    spans = [(i, min(first + docs, i + batch_docs)) for i in range(first, first + docs, batch_docs)]
    with mp.get_context("fork").Pool(procs) as workers:
        yield from workers.imap(_rows_of, spans)


async def load(
    pool: Any, index: Any, batches: Iterator[tuple[Any, ...]], writers: int, limit_s: float, vectors: bool
) -> tuple[int, list[tuple[list[str], list[str], np.ndarray]]]:
    """The batches through the retriever's bulk ``write_batch`` (lexical index deferred), ``writers``
    transactions at once, until ``limit_s`` seconds; with ``vectors`` False the chunks are stored without their
    vectors, which come back (ids, document ids, vectors) for the vector phases. Returns (chunks, those)."""
    from services.retriever.engine import bulk as bulk_store

    t0, written = time.perf_counter(), 0
    held: list[tuple[list[str], list[str], np.ndarray]] = []
    slots = asyncio.Semaphore(writers)
    pending: set[asyncio.Task[Any]] = set()

    async def one(documents: Any, chunks: Any, ids: list[str], vecs: np.ndarray) -> None:
        nonlocal written
        async with slots:
            w = await bulk_store.write_batch(pool, index, documents, chunks, (ids, vecs) if vectors else None)
        written += w.chunks
        if not vectors:
            held.append((ids, [c[1] for c in chunks], vecs))

    for k, (documents, chunks, ids, vecs) in enumerate(batches):
        if time.perf_counter() - t0 > limit_s:
            say(f"  load stopped at its time limit ({limit_s:.0f}s)")
            break
        while len(pending) >= 2 * writers:
            _, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
        pending.add(asyncio.create_task(one(documents, chunks, ids, vecs)))
        if k % 10 == 9:
            say(f"  loaded {written} chunks ({time.perf_counter() - t0:.0f}s)")
    if pending:
        await asyncio.gather(*pending)
    return written, held


async def build(url: str, gen: scale.Generator, model: str, dim: int, args: argparse.Namespace) -> dict[str, Any]:
    """The bulk-built store (with its vectors and HNSW graph), then the reserve (chunks whose vectors the
    vector phases store), whose vectors go to :data:`RESERVE`."""
    from services.retriever.engine import bulk as bulk_store
    from services.retriever.engine.vector.tables import ensure_active_index
    from shared.db import create_pool
    from shared.settings import DatabaseSettings

    db = DatabaseSettings.model_validate(
        {"EVIDENTIA_DATABASE_URL": url, "statement_timeout_s": 0, "EVIDENTIA_DATABASE_POOL_MAX": "20"}
    )
    pool = await create_pool(db)
    out: dict[str, Any] = {"target_chunks": args.chunks, "load_s_limit": args.load_s}
    procs = max(1, min(8, len(os.sched_getaffinity(0)) - 1))
    try:
        index = await ensure_active_index(pool, model, dim, db)
        postmaster = _ppid(int(await pool.fetchval("SELECT pg_backend_pid()")))
        cpu0, t0 = postmaster_cpu_s(postmaster), time.perf_counter()
        async with bulk_store.bulk_load(pool, index) as conn:
            with contextlib.closing(generated(gen, 0, args.chunks // 2, args.batch_docs, procs)) as batches:
                written, _ = await load(pool, index, batches, args.load_writers, args.load_s, vectors=True)
            load_s, cpu1 = time.perf_counter() - t0, postmaster_cpu_s(postmaster)
            say(f"  load: {written} chunks in {load_s:.1f}s = {written / load_s:.0f}/s ({args.load_writers} "
                f"writers); finishing (postings + HNSW, {args.build_workers} workers)")  # fmt: skip
            out.update(
                chunks=written,
                load_s=round(load_s, 1),
                load_chunks_per_s=round(written / load_s, 1),
                load_postgres_cpu_ms_per_chunk=round((cpu1 - cpu0) * 1000 / max(written, 1), 3),
            )
            t = time.perf_counter()
            finished = await bulk_store.finish_bulk_load(
                pool, conn, index, db, workers=args.build_workers, maintenance_work_mem=args.maintenance_work_mem
            )
        finish_s, cpu2 = time.perf_counter() - t, postmaster_cpu_s(postmaster)
        out["finish"] = {k: round(v, 1) if isinstance(v, float) else v for k, v in finished.__dict__.items()}
        out.update(
            finish_s=round(finish_s, 1),
            finish_postgres_cpu_ms_per_chunk=round((cpu2 - cpu1) * 1000 / max(written, 1), 3),
            amortised_chunks_per_s=round(written / (load_s + finish_s), 1),
        )
        say(f"  finish: {finish_s:.1f}s {out['finish']}; {out['finish_postgres_cpu_ms_per_chunk']} ms CPU a chunk")
        out["prewarm"] = await scale.prewarm_graph(pool, index)
        say(f"  prewarm: {out['prewarm']}")
        t = time.perf_counter()
        with contextlib.closing(generated(gen, FIRST_RESERVE, args.reserve_chunks // 2, args.batch_docs, procs)) as b:
            reserved, held = await load(pool, index, b, args.load_writers, args.load_s, vectors=False)
        RESERVE.extend(held)
        out["reserve"] = {"chunks": reserved, "s": round(time.perf_counter() - t, 1)}
        say(f"  reserve: {reserved} chunks stored without vectors (lexical index deferred) in {out['reserve']['s']}s")
        if args.vacuum:
            # What autovacuum would otherwise do during the first steps (the load's tables, the new graph).
            t, cpu = time.perf_counter(), postmaster_cpu_s(postmaster)
            await pool.execute("VACUUM ANALYZE")
            out["vacuum"] = {
                "s": round(time.perf_counter() - t, 1),
                "cpu_s": round(postmaster_cpu_s(postmaster) - cpu, 1),
            }
            say(f"  VACUUM ANALYZE: {out['vacuum']}")
        out["database_bytes"] = int(await pool.fetchval("SELECT pg_database_size(current_database())"))
        return out
    finally:
        await pool.close()


# ----------------------------------------------------------------------------------------- the clients


class Client:
    """One forked client process: its own event loop and pool, ``store`` writers and ``vector`` callers."""

    def __init__(self, url: str, gen: scale.Generator, model: str, dim: int, first_doc: int, cores: set[int]):
        self.url, self.gen, self.model, self.dim = url, gen, model, dim
        self.next_doc = first_doc
        self.cores = cores

    def serve(self, pipe: Connection) -> None:
        try:
            os.sched_setaffinity(0, self.cores)
            asyncio.run(self._serve(pipe))
        except BaseException as exc:  # the parent reads the error instead of waiting forever
            pipe.send({"error": f"{type(exc).__name__}: {exc}"})
        finally:
            pipe.close()

    async def _serve(self, pipe: Connection) -> None:
        from services.retriever.engine.vector.tables import ensure_active_index
        from shared.db import create_pool
        from shared.settings import DatabaseSettings

        db = DatabaseSettings.model_validate(
            {"EVIDENTIA_DATABASE_URL": self.url, "EVIDENTIA_DATABASE_POOL_MAX": "64", "statement_timeout_s": 0}
        )
        pool = await create_pool(db)
        try:
            index = await ensure_active_index(pool, self.model, self.dim, db)
            pipe.send({"ready": True})
            while True:
                cmd = pipe.recv()
                if cmd["phase"] == "stop":
                    return
                cpu, t_start = time.process_time(), cmd["start"]
                await asyncio.sleep(max(0.0, t_start - time.time()))
                if cmd["phase"] == "store":
                    n, last = await self._store(pool, cmd["writers"], cmd["end"])
                else:
                    n, last = await self._vectors(pool, index, cmd["writers"], cmd["concurrency"], cmd["end"])
                pipe.send({"chunks": n, "last": last, "client_cpu_s": time.process_time() - cpu})
        finally:
            await pool.close()

    async def _store(self, pool: Any, writers: int, end: float) -> tuple[int, float]:
        from services.parser.store import store_document

        done, last = [0], [time.time()]

        async def writer() -> None:
            while time.time() < end:
                d = self.gen.doc(self.next_doc)
                self.next_doc += 1
                result = await store_document(pool, scale.parsed_document(d))
                done[0] += len(result.chunks)
                last[0] = time.time()

        await asyncio.gather(*(writer() for _ in range(writers)))
        return done[0], last[0]

    async def _vectors(self, pool: Any, index: Any, callers: int, concurrency: int, end: float) -> tuple[int, float]:
        from services.retriever.engine import upsert_vectors

        done, last = [0], [time.time()]

        async def caller() -> None:
            while time.time() < end:
                part = _take_reserve()
                if part is None:
                    return
                ids, doc_ids, vectors = part
                await upsert_vectors(pool, index, ids, doc_ids, vectors, concurrency=concurrency)
                done[0] += len(ids)
                last[0] = time.time()

        await asyncio.gather(*(caller() for _ in range(callers)))
        return done[0], last[0]


RESERVE: list[tuple[list[str], list[str], np.ndarray]] = []
"""Chunks stored without vectors at the build (ids, document ids, vectors), a bulk batch each: what the vector
phases store, ``BATCH`` at a time, taken in order across the client processes through :data:`_TAKEN`."""
_TAKEN: Any = None  # a shared counter of the reserve's rows handed out (made before the clients fork)


def _take_reserve() -> tuple[list[str], list[str], np.ndarray] | None:
    """The next ``BATCH`` rows of the reserve (within one bulk batch), or None when it is used up."""
    with _TAKEN.get_lock():
        start = int(_TAKEN.value)
        at = 0
        for ids, doc_ids, vectors in RESERVE:
            if start < at + len(ids):
                lo = start - at
                hi = min(len(ids), lo + BATCH)
                _TAKEN.value = at + hi
                return ids[lo:hi], doc_ids[lo:hi], vectors[lo:hi]
            at += len(ids)
        return None


BATCH = 512  # set from --batch before the clients fork


def _split(total: int, parts: int) -> list[int]:
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


class WaitSampler(threading.Thread):
    """What the server's backends are waiting on while a phase runs: ``pg_stat_activity`` read every quarter
    second (its own connection), the mean count of active client backends by wait event ("running": none),
    and of autovacuum and parallel workers (prefixed by their type: their CPU is in the phase's figure too)."""

    def __init__(self, url: str):
        super().__init__(daemon=True)
        self.url = url
        self.stop = threading.Event()
        self.samples = 0
        self.counts: dict[str, int] = {}

    def run(self) -> None:
        with contextlib.suppress(Exception):  # a figure beside the phase's, never a reason to fail it
            asyncio.run(self._sample())

    async def _sample(self) -> None:
        import asyncpg

        conn = await asyncpg.connect(self.url)
        try:
            while not self.stop.is_set():
                rows = await conn.fetch(
                    "SELECT CASE WHEN backend_type = 'client backend' THEN '' ELSE backend_type || ' ' END "
                    "|| coalesce(wait_event_type || ':' || wait_event, 'running') AS w, count(*) AS n "
                    "FROM pg_stat_activity WHERE pid <> pg_backend_pid() AND (state = 'active' "
                    "OR backend_type IN ('autovacuum worker', 'parallel worker')) GROUP BY 1"
                )
                self.samples += 1
                for r in rows:
                    self.counts[r["w"]] = self.counts.get(r["w"], 0) + int(r["n"])
                await asyncio.sleep(0.25)
        finally:
            await conn.close()

    def summary(self) -> dict[str, float]:
        n = max(self.samples, 1)
        return {w: round(c / n, 2) for w, c in sorted(self.counts.items(), key=lambda kv: -kv[1])}


def run_phase(
    url: str,
    pipes: list[Connection],
    postmaster: int,
    phase: str,
    writers: list[int],
    seconds: float,
    concurrency: int = 1,
) -> dict[str, Any]:
    """One timed phase across the clients: chunks/s from the common start to the last write, PostgreSQL CPU,
    and what the backends waited on meanwhile."""
    start = time.time() + 0.3
    cpu0 = postmaster_cpu_s(postmaster)
    sampler = WaitSampler(url)
    sampler.start()
    for pipe, w in zip(pipes, writers, strict=True):
        pipe.send({"phase": phase, "start": start, "end": start + seconds, "writers": w, "concurrency": concurrency})
    results = [pipe.recv() for pipe in pipes]
    cpu = postmaster_cpu_s(postmaster) - cpu0
    sampler.stop.set()
    sampler.join(timeout=5)
    errors = [r["error"] for r in results if "error" in r]
    if errors:
        raise RuntimeError("; ".join(errors))
    n = sum(r["chunks"] for r in results)
    wall = max(r["last"] for r in results) - start
    client_cpu = sum(r["client_cpu_s"] for r in results)
    return {
        "chunks": n,
        "wall_s": round(wall, 2),
        "chunks_per_s": round(n / wall, 1) if wall > 0 else None,
        "postgres_cpu_ms_per_chunk": round(cpu * 1000 / n, 3) if n else None,
        "postgres_cores_busy": round(cpu / wall, 2) if wall > 0 else None,
        "client_cpu_ms_per_chunk": round(client_cpu * 1000 / n, 3) if n else None,
        "client_cores_busy": round(client_cpu / wall, 2) if wall > 0 else None,
        "backends_active_by_wait": sampler.summary(),
    }


async def _store_size(url: str, model: str, dim: int) -> dict[str, int]:
    from services.retriever.engine.vector.tables import ensure_active_index
    from shared.db import create_pool
    from shared.settings import DatabaseSettings

    db = DatabaseSettings.model_validate({"EVIDENTIA_DATABASE_URL": url, "EVIDENTIA_DATABASE_POOL_MAX": "2"})
    pool = await create_pool(db)
    try:
        index = await ensure_active_index(pool, model, dim, db)
        return {
            "chunks": int(await pool.fetchval("SELECT count(*) FROM chunks")),
            "vectors": int(await pool.fetchval(f"SELECT count(*) FROM {index.table_name}")),
        }
    finally:
        await pool.close()


def step(
    url: str, gen: scale.Generator, model: str, dim: int, postmaster: int, k: int, statements: int, index_no: int,
    client_cores: set[int], args: argparse.Namespace,
) -> dict[str, Any]:  # fmt: skip
    """One step: ``statements`` writers store documents, then ``statements`` vector statements store their
    vectors; clients forked for the step (pinned to ``client_cores``)."""
    from shared.settings import DatabaseSettings

    per_call = max(1, DatabaseSettings().vector_write_concurrency)
    procs = max(1, min(args.client_procs, statements))
    ctx = mp.get_context("fork")
    pipes: list[Connection] = []
    children = []
    for c in range(procs):
        first = FIRST_LIVE + index_no * STEP_DOCS + c * (STEP_DOCS // procs)
        parent_end, child_end = ctx.Pipe()
        client = Client(url, gen, model, dim, first, client_cores)
        p = ctx.Process(target=client.serve, args=(child_end,), daemon=True)
        p.start()
        child_end.close()
        pipes.append(parent_end)
        children.append(p)
    out: dict[str, Any] = {"k": k, "statements": statements, "client_procs": procs, "vector_call_concurrency": per_call}
    try:
        ready = [pipe.recv() for pipe in pipes]
        errors = [r["error"] for r in ready if "error" in r]
        if errors:
            raise RuntimeError("; ".join(errors))
        out["store"] = run_phase(url, pipes, postmaster, "store", _split(statements, procs), args.step_s)
        callers = max(1, statements // per_call)
        out["vectors"] = run_phase(
            url, pipes, postmaster, "vectors", _split(callers, procs), args.vector_s, concurrency=per_call
        )
        s, v = out["store"], out["vectors"]
        if s["chunks_per_s"] and v["chunks_per_s"]:
            # One after the other (the figure bench/scale.py's production path reports), and what the k cores
            # would carry if both ran at once and PostgreSQL's CPU were the only limit.
            out["all_in_chunks_per_s"] = round(1 / (1 / s["chunks_per_s"] + 1 / v["chunks_per_s"]), 1)
            cpu_ms = s["postgres_cpu_ms_per_chunk"] + v["postgres_cpu_ms_per_chunk"]
            out["postgres_cpu_ms_per_chunk"] = round(cpu_ms, 3)
            out["cpu_bound_chunks_per_s_on_k"] = round(k * 1000 / cpu_ms, 1)
    finally:
        for pipe in pipes:
            with contextlib.suppress(OSError):
                pipe.send({"phase": "stop"})
        for p in children:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
    out["store_size_after"] = asyncio.run(_store_size(url, model, dim))
    return out


# ----------------------------------------------------------------------------------------- the run


def write(result: dict[str, Any], path: Path | None) -> None:
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(result, indent=2))
        tmp.replace(path)


def run(args: argparse.Namespace) -> dict[str, Any]:
    ncpu = len(os.sched_getaffinity(0))
    cores = [min(k, ncpu) for k in args.cores_list]
    source = scale.load_source(None)
    basis, model = random_basis(source, args.real_vectors, args.dim)
    gen = scale.Generator(source, basis)
    settings = {
        "shared_buffers": args.shared_buffers or scale.shared_buffers(max(args.chunks * 2, 1_000_000)),
        "max_wal_size": "8GB",
        "max_connections": "300",
        # The build's parallel HNSW workers on every core; the steps lower max_parallel_workers to k.
        "max_worker_processes": str(max(8, ncpu + 4)),
        "max_parallel_workers": str(ncpu),
        "max_parallel_maintenance_workers": str(max(1, ncpu - 1)),
    }
    result: dict[str, Any] = {
        "cpus": ncpu,
        "cores": cores,
        "statements_per_core": args.statements_list,
        "postgres_settings": settings,
        "model": model,
        "args": {k: v for k, v in vars(args).items() if k != "json_out"},
        "steps": [],
    }
    say(f"{ncpu} cores; PostgreSQL {settings}; cores {cores}, statements x{args.statements_list}")
    write(result, args.json_out)
    root = Path(args.root)
    root.mkdir(parents=True, exist_ok=True)
    with scale.database(root, settings) as url:
        postmaster = asyncio.run(_postmaster(url))
        dim = basis.shape[1]

        def build_store() -> dict[str, Any]:
            return asyncio.run(build(url, gen, model, dim, args))

        result["build"] = guarded(result, "build", build_store)
        write(result, args.json_out)
        n = 0
        for k in cores:
            pg_cores = set(range(k))
            client_cores = set(range(k, ncpu)) if k < ncpu else set(range(ncpu))
            pinned = pin_server(postmaster, pg_cores)
            say(f"k={k}: {pinned} PostgreSQL processes pinned to cores 0-{k - 1}; clients on {sorted(client_cores)}")
            guarded(result, f"k{k}_parallel", functools.partial(_fit_parallel_workers, url, k))
            for m in args.statements_list:
                statements = m * k
                say(f"k={k}, {statements} statements at once: store for {args.step_s}s, then vectors")
                out = guarded(
                    result,
                    f"k{k}_s{statements}",
                    functools.partial(step, url, gen, model, dim, postmaster, k, statements, n, client_cores, args),
                )
                n += 1
                if out is not None:
                    result["steps"].append(out)
                    say(f"  RESULT k={k} S={statements}: {json.dumps(out)}")
                write(result, args.json_out)
    return result


def _fit_parallel_workers(url: str, k: int) -> None:
    asyncio.run(_max_parallel_workers(url, k))


async def _max_parallel_workers(url: str, k: int) -> None:
    """Parallel workers a query may use, to fit k, for every session started from now on (the database's
    default). Searches only: the live write statements run no parallel plan."""
    import asyncpg

    conn = await asyncpg.connect(url)
    try:
        name = await conn.fetchval("SELECT quote_ident(current_database())")
        await conn.execute(f"ALTER DATABASE {name} SET max_parallel_workers = {int(k)}")
    finally:
        await conn.close()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--root", required=True, help="Where PostgreSQL's data goes (a fresh folder).")
    p.add_argument("--cores", default="4,8,16", help="PostgreSQL's cores, one step set each (capped at the CPUs).")
    p.add_argument("--statements", default="1,2", help="Statements at once, as multiples of k.")
    p.add_argument("--chunks", type=int, default=200_000, help="Chunks to bulk-build (fewer if --load-s runs out).")
    p.add_argument("--load-s", type=float, default=90.0, help="Seconds of bulk loading at most.")
    p.add_argument("--batch-docs", type=int, default=2500, help="Documents a bulk transaction.")
    p.add_argument("--load-writers", type=int, default=4, help="Bulk transactions at once.")
    p.add_argument(
        "--reserve-chunks", type=int, default=200_000, help="Chunks stored without vectors for the vector phases."
    )
    p.add_argument("--build-workers", type=int, default=0, help="HNSW build's parallel workers (0: CPUs - 1).")
    p.add_argument("--maintenance-work-mem", default="4GB")
    p.add_argument("--shared-buffers", default=None, help="Default: bench/scale.py's size for 10^6 chunks.")
    p.add_argument("--step-s", type=float, default=8.0, help="Seconds of document storing a step.")
    p.add_argument("--vector-s", type=float, default=6.0, help="Seconds of vector storing a step at most.")
    p.add_argument("--batch", type=int, default=512, help="Vectors an upsert_vectors call (the retriever's batch).")
    p.add_argument("--client-procs", type=int, default=4, help="Client processes (at most the statements).")
    p.add_argument("--real-vectors", type=int, default=500, help="Abstracts with a (random) basis vector.")
    p.add_argument("--dim", type=int, default=384, help="Vector dimension (the default model's).")
    p.add_argument("--no-vacuum", dest="vacuum", action="store_false", help="No VACUUM ANALYZE after the build.")
    p.add_argument("--json-out", type=Path, default=None)
    args = p.parse_args(argv)
    args.cores_list = [int(x) for x in args.cores.split(",") if x.strip()]
    args.statements_list = [int(x) for x in args.statements.split(",") if x.strip()]
    if args.build_workers <= 0:
        args.build_workers = max(1, len(os.sched_getaffinity(0)) - 1)
    return args


def main(argv: list[str] | None = None) -> int:
    global BATCH, _TAKEN
    args = parse_args(argv)
    BATCH = args.batch
    _TAKEN = mp.get_context("fork").Value("q", 0)
    result = run(args)
    result["load_avg"] = os.getloadavg()
    write(result, args.json_out)
    say("done")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
