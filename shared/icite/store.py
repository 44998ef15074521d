"""The ``citation_metrics`` table: loading iCite rows (COPY into a temporary table, then one upsert on PMID per
batch) and reading them back. Search joins it in the retriever's citation filters and hits."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import asyncpg

from shared.icite.parse import BATCH_ROWS, COLUMNS, BadRow, IciteRow, batches

_UPDATES = ", ".join(f"{c} = EXCLUDED.{c}" for c in COLUMNS if c != "pmid")
_COLUMN_LIST = ", ".join(COLUMNS)


@dataclass(frozen=True)
class Upserted:
    inserted: int
    updated: int


async def upsert_citation_metrics(conn: asyncpg.Connection, rows: Sequence[IciteRow]) -> Upserted:
    """Store ``rows`` (distinct PMIDs) in one transaction: new PMIDs inserted, known ones replaced (every
    column, ``updated_at`` now); the rows of other PMIDs are left as they are."""
    if not rows:
        return Upserted(0, 0)
    async with conn.transaction():
        await conn.execute(
            "CREATE TEMP TABLE IF NOT EXISTS incoming_citation_metrics "
            "(LIKE citation_metrics INCLUDING DEFAULTS) ON COMMIT DELETE ROWS"
        )
        await conn.copy_records_to_table(
            "incoming_citation_metrics", records=[r.record() for r in rows], columns=list(COLUMNS)
        )
        counts = await conn.fetchrow(
            f"""WITH up AS (
                    INSERT INTO citation_metrics ({_COLUMN_LIST})
                    SELECT {_COLUMN_LIST} FROM incoming_citation_metrics
                    ON CONFLICT (pmid) DO UPDATE SET {_UPDATES}, updated_at = now()
                    RETURNING (xmax = 0) AS inserted)
                SELECT count(*) FILTER (WHERE inserted) AS inserted, count(*) FILTER (WHERE NOT inserted) AS updated
                FROM up"""
        )
    assert counts is not None
    return Upserted(int(counts["inserted"]), int(counts["updated"]))


async def citation_metrics_of(pool: asyncpg.Pool, pmids: Sequence[str]) -> dict[str, asyncpg.Record]:
    """The stored rows of ``pmids``, by PMID (PMIDs without metrics are absent)."""
    rows = await pool.fetch("SELECT * FROM citation_metrics WHERE pmid = ANY($1::text[])", list(pmids))
    return {r["pmid"]: r for r in rows}


@dataclass
class IciteImport:
    """The outcome of one import: rows inserted (new PMIDs), updated (PMIDs already there), skipped (malformed;
    the first :data:`KEPT_BAD_ROWS` of them kept in ``bad`` to report)."""

    inserted: int = 0
    updated: int = 0
    skipped: int = 0
    bad: list[BadRow] = field(default_factory=list)

    @property
    def loaded(self) -> int:
        return self.inserted + self.updated


#: Malformed rows an :class:`IciteImport` keeps to show (all are counted).
KEPT_BAD_ROWS = 20


async def load_icite(
    conn: asyncpg.Connection,
    rows: Iterable[IciteRow | BadRow],
    batch_size: int = BATCH_ROWS,
    on_batch: Callable[[IciteImport], None] | None = None,
) -> IciteImport:
    """Stream ``rows`` (:func:`services.retriever.icite.read_icite`) into ``citation_metrics``, one COPY and
    upsert per ``batch_size`` rows, each batch its own transaction (an interrupted import keeps the batches
    done; running it again completes it). ``on_batch`` sees the running totals after each batch."""
    result = IciteImport()
    for good, bad in batches(rows, batch_size):
        done = await upsert_citation_metrics(conn, good)
        result.inserted += done.inserted
        result.updated += done.updated
        result.skipped += len(bad)
        result.bad.extend(bad[: max(0, KEPT_BAD_ROWS - len(result.bad))])
        if on_batch is not None:
            on_batch(result)
    return result
