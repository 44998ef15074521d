"""HNSW against IVFFlat for the vector table (issue 14): recall@10 against exact search, query latency, build
time and what a stored vector costs the database.

Two parts, against a store that ``bench/scale.py --root DIR`` built:

``--sweep``: the store's own index as the retriever searches it (``nearest_chunks``, the product's statement
and settings), at each given HNSW ``ef_search`` or IVFFlat ``probes``: recall@10 of the exact 10 nearest
(numpy over every stored vector) and latency. Queries are the corpus's questions encoded as ``bench/scale.py``
encodes them, and stored vectors moved by noise.

``--variants``: each index built afresh on a scratch copy of the vector table, less ``--hold`` vectors that are
then inserted (two statements at once, 256 a statement): build seconds, inserted vectors a second and the
database's CPU milliseconds a vector (every PostgreSQL process's CPU time on this machine), recall@10 and
latency (plain ``ORDER BY <=> LIMIT 10``). The copy is dropped afterwards. With ``--npz`` the variants are built
on real vectors instead (an ``evidentia eval retrieval`` embedding cache, e.g. SciFact's passages), whose
held-out rows are the queries: generated stores cluster around their few real vectors, where any index finds
the nearest; real vectors tell the methods apart.

    python bench/vector_index.py --root /tmp/scaleivf_store --sweep probes=8,16,32,64
    python bench/vector_index.py --root /tmp/scale100k --variants hnsw:16:64,hnsw:16:32,ivfflat:100,ivfflat:316
    python bench/vector_index.py --root /tmp/scale100k --npz ~/.cache/evidentia/eval/<model>.npz \
        --variants hnsw:16:64,ivfflat:107:4,ivfflat:107:8
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path[:0] = [str(Path(__file__).resolve().parents[1]), str(Path(__file__).resolve().parent)]

import scale  # noqa: E402

K = 10


def postgres_cpu_s() -> float:
    """CPU seconds used so far by every PostgreSQL process on this machine (the bench's server is the only one)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if not Path(f"/proc/{pid}/comm").read_text().startswith("postgres"):
                continue
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / tick
        except OSError:
            continue
    return total


async def stored_vectors(conn: Any, table: str) -> tuple[list[str], np.ndarray]:
    """Every stored vector (as float32, unit length) and its chunk id, in chunk-id order."""
    ids: list[str] = []
    parts: list[np.ndarray] = []
    async with conn.transaction():
        async for r in conn.cursor(f"SELECT chunk_id, embedding::vector AS e FROM {table} ORDER BY chunk_id"):
            ids.append(r["chunk_id"])
            parts.append(r["e"].to_numpy())
    held = np.stack(parts).astype(np.float32)
    held /= np.linalg.norm(held, axis=1, keepdims=True)
    return ids, held


def exact_top(held: np.ndarray, queries: np.ndarray, k: int = K) -> np.ndarray:
    """Row numbers of each query's ``k`` nearest by cosine, exactly (blocks of 100k rows)."""
    best_s = np.full((len(queries), 0), -np.inf, dtype=np.float32)
    best_i = np.zeros((len(queries), 0), dtype=np.int64)
    for start in range(0, len(held), 100_000):
        sims = queries @ held[start : start + 100_000].T
        top = np.argpartition(-sims, min(k, sims.shape[1] - 1), axis=1)[:, :k]
        best_s = np.concatenate([best_s, np.take_along_axis(sims, top, 1)], axis=1)
        best_i = np.concatenate([best_i, top + start], axis=1)
        keep = np.argsort(-best_s, axis=1)[:, :k]
        best_s, best_i = np.take_along_axis(best_s, keep, 1), np.take_along_axis(best_i, keep, 1)
    return best_i


def query_vectors(gen: scale.Generator, held: np.ndarray, count: int, seed: int = 7) -> np.ndarray:
    """Half the corpus's questions encoded as bench/scale.py encodes them, half stored vectors moved by noise."""
    encoder = scale.QueryEncoder(gen.basis)
    asked = [encoder.encode(q) for q in gen.source.queries[: count // 2]]
    rng = np.random.default_rng(seed)
    near = held[rng.choice(len(held), count - len(asked), replace=False)]
    near = near + rng.normal(0, 0.6 / np.sqrt(held.shape[1]), near.shape).astype(np.float32)
    out = np.concatenate([np.stack(asked), near]).astype(np.float32)
    return out / np.linalg.norm(out, axis=1, keepdims=True)


def _stats(latencies: list[float], recalls: list[float]) -> dict[str, float]:
    lat = sorted(latencies)
    return {
        "recall_at_10": round(float(np.mean(recalls)), 4),
        "p50_ms": round(lat[len(lat) // 2], 2),
        "p95_ms": round(lat[min(len(lat) - 1, int(len(lat) * 0.95))], 2),
    }


async def sweep(url: str, gen: scale.Generator, args: argparse.Namespace) -> dict[str, Any]:
    from services.retriever.engine.vector.ann_index import ann_indexes
    from services.retriever.engine.vector.search import nearest_chunks
    from services.retriever.engine.vector.tables import active_index
    from shared.db import create_pool
    from shared.models import SearchFilters
    from shared.settings import DatabaseSettings

    db = DatabaseSettings.model_validate({"EVIDENTIA_DATABASE_URL": url, "statement_timeout_s": 0})
    pool = await create_pool(db)
    try:
        index = await active_index(pool)
        assert index is not None, "no active vector index in this store"
        async with pool.acquire() as conn:
            present = [i.__dict__ for i in await ann_indexes(conn, index.table_name)]
            t = time.perf_counter()
            ids, held = await stored_vectors(conn, index.table_name)
        print(f"{len(ids)} vectors read in {time.perf_counter() - t:.0f}s; indexes {present}", flush=True)
        queries = query_vectors(gen, held, args.queries)
        truth = [{ids[j] for j in row} for row in exact_top(held, queries)]
        kind, _, values = args.sweep.partition("=")
        out: dict[str, Any] = {"vectors": len(ids), "indexes": present, "queries": len(queries), kind: {}}
        filters = SearchFilters(include_retracted=True)
        for value in (int(v) for v in values.split(",")):
            ef, probes = (value, 1) if kind == "ef_search" else (db.hnsw_ef_search, value)
            for q in queries[:10]:  # warm
                await nearest_chunks(pool, index, q, K, filters, ef, probes=probes)
            lat, rec = [], []
            for q, want in zip(queries, truth, strict=True):
                t = time.perf_counter()
                got = await nearest_chunks(pool, index, q, K, filters, ef, probes=probes)
                lat.append((time.perf_counter() - t) * 1000)
                rec.append(len({c for c, _ in got} & want) / K)
            out[kind][str(value)] = _stats(lat, rec)
            print(f"  {kind} {value}: {out[kind][str(value)]}", flush=True)
        return out
    finally:
        await pool.close()


async def variants(url: str, gen: scale.Generator, args: argparse.Namespace) -> dict[str, Any]:
    import asyncpg
    from pgvector import HalfVector
    from pgvector.asyncpg import register_vector

    from services.retriever.engine.vector.tables import active_index, hnsw_index_sql, ivfflat_index_sql
    from shared.db import create_pool
    from shared.settings import DatabaseSettings

    async def connect() -> Any:
        conn = await asyncpg.connect(url)
        await register_vector(conn)
        return conn

    db = DatabaseSettings.model_validate({"EVIDENTIA_DATABASE_URL": url, "statement_timeout_s": 0})
    pool = await create_pool(db)
    index = await active_index(pool)
    await pool.close()
    assert args.npz or (index is not None and index.precision == "half"), "variants compare halfvec tables"
    conn = await connect()
    scratch = "bench_vector_variant"
    out: dict[str, Any] = {}
    try:
        rng = np.random.default_rng(7)
        if args.npz:
            loaded = np.load(args.npz)
            held = loaded["vectors"].astype(np.float32)
            held /= np.linalg.norm(held, axis=1, keepdims=True)
            order = rng.permutation(len(held))
            queries, held = held[order[: args.queries]], held[order[args.queries :]]  # held-out rows ask
            ids = [f"v{j:08d}" for j in range(len(held))]
            dim = held.shape[1]
        else:
            ids, held = await stored_vectors(conn, index.table_name)
            queries = query_vectors(gen, held, args.queries)
            dim = index.dim
        hold = rng.permutation(len(ids))[: args.hold]
        truth = [{ids[j] for j in row} for row in exact_top(held, queries)]
        held_rows = [(c, HalfVector(v)) for c, v in zip(ids, held, strict=True)]
        await conn.execute("SET maintenance_work_mem = '1GB'")
        for spec in args.variants.split(","):
            kind, *p = spec.split(":")
            await conn.execute(f"DROP TABLE IF EXISTS {scratch}")
            await conn.execute(f"CREATE TABLE {scratch} (chunk_id text PRIMARY KEY, embedding halfvec({dim}) NOT NULL)")
            held_out = set(hold.tolist())
            await conn.copy_records_to_table(
                scratch,
                records=[r for j, r in enumerate(held_rows) if j not in held_out],
                columns=["chunk_id", "embedding"],
            )
            query = f"SELECT chunk_id FROM {scratch} ORDER BY embedding <=> $1::halfvec LIMIT {K}"
            if kind == "hnsw":
                cfg = db.model_copy(update={"hnsw_m": int(p[0]), "hnsw_ef_construction": int(p[1])})
                sql = hnsw_index_sql(scratch, cfg, "half")
                search = f"SET hnsw.ef_search = {int(p[2]) if len(p) > 2 else db.hnsw_ef_search}"
            elif kind == "hnswbq":  # HNSW over the vectors' signs (hamming), the candidates re-ranked exactly
                bits = f"binary_quantize(embedding)::bit({dim})"
                sql = (
                    f"CREATE INDEX ON {scratch} USING hnsw (({bits}) bit_hamming_ops) "
                    f"WITH (m = {int(p[0])}, ef_construction = {int(p[1])})"
                )
                depth = int(p[2]) if len(p) > 2 else 100
                search = f"SET hnsw.ef_search = {depth}"
                query = (
                    f"SELECT chunk_id FROM (SELECT chunk_id, embedding FROM {scratch} "
                    f"ORDER BY {bits} <~> binary_quantize($1::halfvec) LIMIT {depth}) c "
                    f"ORDER BY embedding <=> $1::halfvec LIMIT {K}"
                )
            else:
                sql = ivfflat_index_sql(scratch, "half", int(p[0]))
                search = f"SET ivfflat.probes = {int(p[1]) if len(p) > 1 else db.ivfflat_probes}"
            t = time.perf_counter()
            await conn.execute(sql)
            build_s = time.perf_counter() - t
            writers = [await connect() for _ in range(2)]
            rows = [held_rows[j] for j in hold]

            async def insert(n: int, w: Any, rows: list[tuple[str, Any]] = rows) -> None:
                for i in range(n * 256, len(rows), 512):
                    part = rows[i : i + 256]
                    await w.execute(
                        f"INSERT INTO {scratch} SELECT * FROM unnest($1::text[], $2::halfvec[])",
                        [c for c, _ in part],
                        [v for _, v in part],
                    )

            cpu, t = postgres_cpu_s(), time.perf_counter()
            await asyncio.gather(*(insert(n, w) for n, w in enumerate(writers)))
            insert_s, cpu = time.perf_counter() - t, postgres_cpu_s() - cpu
            for w in writers:
                await w.close()
            await conn.execute(search)
            lat, rec = [], []
            for q, want in zip(queries, truth, strict=True):
                t = time.perf_counter()
                got = await conn.fetch(query, HalfVector(q))
                lat.append((time.perf_counter() - t) * 1000)
                rec.append(len({r["chunk_id"] for r in got} & want) / K)
            out[spec] = {
                "build_s": round(build_s, 1),
                "insert_per_s": round(len(hold) / insert_s),
                "postgres_cpu_ms_per_vector": round(cpu * 1000 / len(hold), 3),
                **_stats(lat, rec),
            }
            print(f"  {spec}: {out[spec]}", flush=True)
        return {"vectors": len(ids), "held_out": len(hold), "queries": len(queries), "variants": out}
    finally:
        await conn.execute(f"DROP TABLE IF EXISTS {scratch}")
        await conn.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--root", required=True, help="A store built by bench/scale.py --root.")
    p.add_argument("--corpus", default=None, help="The corpus the store was built from (default: bundled).")
    p.add_argument("--real-vectors", type=int, default=600)
    p.add_argument("--cache-dir", default=str(Path.home() / ".cache" / "evidentia" / "scale"))
    p.add_argument("--sweep", default=None, help="probes=8,16,32 or ef_search=40,100,200 on the store's index.")
    p.add_argument(
        "--variants",
        default=None,
        help="hnsw:M:EF_CONSTRUCTION[:EF_SEARCH],hnswbq:M:EF_CONSTRUCTION[:DEPTH],ivfflat:LISTS[:PROBES],...",
    )
    p.add_argument("--npz", type=Path, default=None, help="Real vectors for --variants (an eval embedding cache).")
    p.add_argument("--hold", type=int, default=4000, help="Vectors inserted after each variant's build.")
    p.add_argument("--queries", type=int, default=200)
    p.add_argument("--store-chunks", type=int, default=1_000_000, help="The store's size, for shared_buffers.")
    p.add_argument("--json-out", type=Path, default=None)
    args = p.parse_args(argv)
    source = scale.load_source(Path(args.corpus) if args.corpus else None)
    basis, _ = scale.real_basis(source, min(args.real_vectors, len(source.abstracts)), Path(args.cache_dir))
    gen = scale.Generator(source, basis)
    settings = {"shared_buffers": scale.shared_buffers(args.store_chunks)}
    result: dict[str, Any] = {"corpus": source.name, "postgres_settings": settings, "cpus": os.cpu_count()}
    with scale.database(Path(args.root), settings) as url:
        if args.sweep:
            result["sweep"] = asyncio.run(sweep(url, gen, args))
        if args.variants:
            result["variants"] = asyncio.run(variants(url, gen, args))
    print(json.dumps(result))
    if args.json_out:
        args.json_out.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
