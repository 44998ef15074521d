"""Compaction of the lexical index: each pending term's small blocks merged size-tiered, the postings of removed
chunks dropped (run in the background, one replica at a time; a query is exact before and after)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg
import numpy as np

from services.retriever.engine.jobs import COMPACTION_LOCK, advisory_session
from services.retriever.engine.lexical.blocks import (
    BLOCK_POSTINGS,
    BOUND_COLUMNS,
    POSTING,
    BlockBounds,
    EncodedBlock,
    encode_blocks,
)
from services.retriever.engine.lexical.postings import dead_keys
from shared.periodic import run_every

log = logging.getLogger(__name__)


#: The lexical writers' lock (``bm25_add``/``bm25_remove`` take it for their transaction); compaction too.
_WRITER_LOCK = "SELECT pg_advisory_xact_lock(4542054, 14)"


@dataclass(frozen=True)
class CompactionReport:
    terms: int
    blocks_read: int
    blocks_written: int
    dead_dropped: int


def merge_plan(sizes: Sequence[int], block_postings: int) -> list[int]:
    """Which of a term's blocks (by position in ``sizes``, their posting counts) to merge now, size-tiered:
    full blocks (``block_postings`` or more) stay; of the others, from the smallest up, a block joins the
    merge while it holds at most twice what the merge holds so far. Each posting is thus rewritten about
    log2(block_postings) times in all, however it arrives. Fewer than two blocks: nothing to merge.

    A small block too small for the next one to join it (a remnant of a block rewritten without removed
    chunks' postings, or of a short write) waits alone, and the merge starts from the next size up: started
    only from the smallest, one block of 3 postings kept a term's hundreds of later blocks of ~100 from ever
    merging (a benchmark store's common terms, ~400 blocks each, every search walking them all)."""
    small = sorted((n, i) for i, n in enumerate(sizes) if n < block_postings)
    for start in range(len(small) - 1):
        picked: list[int] = []
        held = 0
        for n, i in small[start:]:
            if picked and n > 2 * held:
                break
            picked.append(i)
            held += n
        if len(picked) >= 2:
            return picked
    return []


def _holds_any(sorted_keys: np.ndarray, low: int, high: int) -> bool:
    """Whether any of ``sorted_keys`` lies in ``[low, high]``."""
    i = int(np.searchsorted(sorted_keys, low))
    return i < len(sorted_keys) and int(sorted_keys[i]) <= high


async def compact_batch(conn: asyncpg.Connection, *, terms: int, block_postings: int) -> CompactionReport | None:
    """One transaction: up to ``terms`` pending terms merged (and cleared of dead postings). None when no
    term is pending. Holds the writers' lock while it runs (a batch takes milliseconds)."""
    async with conn.transaction():
        await conn.execute(_WRITER_LOCK)
        rows = await conn.fetch("SELECT term_id, has_dead FROM bm25_pending ORDER BY term_id LIMIT $1", terms)
        if not rows:
            return None
        pending = [int(r["term_id"]) for r in rows]
        with_dead = {int(r["term_id"]) for r in rows if r["has_dead"]}
        dead = await dead_keys(conn)
        # The plan needs only the blocks' sizes and key ranges: small blocks are merged size-tiered, and a
        # block is rewritten without the removed chunks' postings only if a dead key falls in its range.
        meta = await conn.fetch(
            "SELECT term_id, block_id, n, min_key, max_key FROM bm25_blocks WHERE term_id = ANY ($1::integer[]) "
            "AND (n < $2 OR term_id = ANY ($3::integer[])) ORDER BY term_id, block_id",
            pending,
            block_postings,
            sorted(with_dead),
        )
        by_term: dict[int, list[asyncpg.Record]] = {}
        for r in meta:
            by_term.setdefault(int(r["term_id"]), []).append(r)
        dead_sorted = np.sort(dead)
        chosen: dict[int, list[int]] = {}
        for term, blocks in by_term.items():
            picked = set(merge_plan([int(b["n"]) for b in blocks], block_postings))
            if term in with_dead:
                picked.update(i for i, b in enumerate(blocks) if _holds_any(dead_sorted, b["min_key"], b["max_key"]))
            if picked:
                chosen[term] = [int(blocks[i]["block_id"]) for i in sorted(picked)]
        drop = [block for blocks in chosen.values() for block in blocks]
        postings = {
            int(r["block_id"]): r["postings"]
            for r in await conn.fetch(
                "SELECT block_id, postings FROM bm25_blocks WHERE term_id = ANY ($1::integer[]) "
                "AND block_id = ANY ($2::bigint[])",
                list(chosen),
                drop,
            )
        }
        new_terms: list[int] = []
        new_blocks: list[EncodedBlock] = []
        dropped = 0
        for term, blocks in chosen.items():
            merged = np.frombuffer(b"".join(postings[block] for block in blocks), dtype=POSTING)
            if term in with_dead:
                keep = ~np.isin(merged["key"], dead)
                dropped += int((~keep).sum())
                merged = merged[keep]
            merged = merged[np.argsort(merged["key"], kind="stable")]
            for row_term, block in encode_blocks(np.full(len(merged), term), merged, block_postings):
                new_terms.append(row_term)
                new_blocks.append(block)
        if drop:
            await conn.execute("DELETE FROM bm25_blocks WHERE block_id = ANY ($1::bigint[])", drop)
        if new_terms:
            await insert_blocks(conn, new_terms, new_blocks)
        await conn.execute("DELETE FROM bm25_pending WHERE term_id = ANY ($1::integer[])", pending)
        if len(dead) and not await conn.fetchval("SELECT EXISTS (SELECT 1 FROM bm25_pending WHERE has_dead)"):
            # Every term pending when these keys died has been cleared of them (a removal marks its terms
            # pending in the same transaction that records the dead key): they are gone from every block.
            await conn.execute("DELETE FROM bm25_dead WHERE chunk_key = ANY ($1::integer[])", dead.tolist())
        return CompactionReport(len(pending), len(drop), len(new_terms), dropped)


async def insert_blocks(conn: asyncpg.Connection, terms: Sequence[int], blocks: Sequence[EncodedBlock]) -> None:
    """Store ``blocks`` (``blocks[i]`` of term ``terms[i]``) with their key ranges and bounds, in one statement."""
    bounds = [b.bounds.as_tuple() for b in blocks]
    await conn.execute(
        f"INSERT INTO bm25_blocks (term_id, n, min_key, max_key, {', '.join(BOUND_COLUMNS)}, postings) "
        "SELECT * FROM unnest($1::integer[], $2::integer[], $3::integer[], $4::integer[], $5::smallint[], "
        "$6::smallint[], $7::smallint[], $8::integer[], $9::smallint[], $10::smallint[], $11::bytea[])",
        list(terms),
        [b.n for b in blocks],
        [b.min_key for b in blocks],
        [b.max_key for b in blocks],
        *([row[i] for row in bounds] for i in range(len(BOUND_COLUMNS))),
        [b.postings for b in blocks],
    )


async def bound_blocks(conn: asyncpg.Connection, *, limit: int) -> int:
    """Give up to ``limit`` blocks written without bounds (before blocks had them) their bounds, computed from
    their postings; how many were. A search takes such a block as unbounded until then."""
    rows = await conn.fetch(
        "SELECT block_id, postings FROM bm25_blocks WHERE max_tf_text IS NULL ORDER BY block_id LIMIT $1", limit
    )
    if not rows:
        return 0
    bounds = [BlockBounds.of(np.frombuffer(r["postings"], dtype=POSTING)).as_tuple() for r in rows]
    sets = ", ".join(f"{c} = v.{c}" for c in BOUND_COLUMNS)
    await conn.execute(
        f"UPDATE bm25_blocks b SET {sets} FROM unnest($1::bigint[], $2::smallint[], $3::smallint[], "
        f"$4::smallint[], $5::integer[], $6::smallint[], $7::smallint[]) AS v(block_id, {', '.join(BOUND_COLUMNS)}) "
        "WHERE b.block_id = v.block_id",
        [int(r["block_id"]) for r in rows],
        *([row[i] for row in bounds] for i in range(len(BOUND_COLUMNS))),
    )
    return len(rows)


async def compact(
    pool: asyncpg.Pool,
    *,
    terms_per_batch: int = 500,
    block_postings: int = BLOCK_POSTINGS,
    max_batches: int | None = None,
) -> CompactionReport:
    """Merge the pending terms' blocks until none is pending (or ``max_batches`` ran), one batch a
    transaction; one compacting session at a time (another that holds the lock: nothing is done here)."""
    total = CompactionReport(0, 0, 0, 0)
    async with advisory_session(pool, COMPACTION_LOCK) as conn:
        if conn is None:
            return total
        batches = 0
        while await bound_blocks(conn, limit=terms_per_batch):
            pass
        while max_batches is None or batches < max_batches:
            report = await compact_batch(conn, terms=terms_per_batch, block_postings=block_postings)
            if report is None:
                break
            batches += 1
            total = CompactionReport(
                total.terms + report.terms,
                total.blocks_read + report.blocks_read,
                total.blocks_written + report.blocks_written,
                total.dead_dropped + report.dead_dropped,
            )
    return total


async def compact_forever(pool: asyncpg.Pool, every_s: float, **kwargs: Any) -> None:
    """:func:`compact` every ``every_s`` seconds until cancelled; a failure is logged and retried next time."""

    async def step() -> None:
        report = await compact(pool, **kwargs)
        if report.terms:
            log.info(
                "lexical index compacted",
                extra={
                    "terms": report.terms,
                    "blocks_read": report.blocks_read,
                    "blocks_written": report.blocks_written,
                    "dead_dropped": report.dead_dropped,
                },
            )

    await run_every(every_s, step, failure="lexical index compaction failed", log=log, wait_first=True)
