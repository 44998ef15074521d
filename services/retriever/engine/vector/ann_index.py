"""The vector table's approximate nearest-neighbour index, kept as configured.

``EVIDENTIA_DATABASE_VECTOR_INDEX`` picks pgvector's ``hnsw`` (the default) or ``ivfflat``:

- **HNSW** is a graph: the best recall for a query's time, but every stored vector walks the graph to find
  its neighbours and rewrites theirs; at 10^6 vectors that is ~3 ms of database CPU a vector, which caps a
  2-core database at a few hundred stored chunks a second.
- **IVFFlat** keeps the vectors in lists around k-means centres: a stored vector is compared with the
  centres only (~0.05 ms) and a query reads the ``probes`` lists nearest to it. Its centres are trained on
  the vectors stored when it is built, so it is built only once the table holds ``ivfflat_min_rows`` (a
  new store is searched exactly meanwhile) and built again, beside the old one, once the lists its rows call
  for reach ``ivfflat_retrain_growth`` times those it has (automatic lists: pgvector's advice of rows / 1,000
  up to 10^6 rows and their square root past it).

:func:`maintain_ann_index` compares the table's indexes with the settings and builds what is missing with
``CREATE INDEX CONCURRENTLY`` (writes and searches go on), then drops what the new index replaces; an index
a failed build left invalid is dropped first. The retriever runs it in the background
(:func:`maintain_forever`, one replica at a time by an advisory lock), so switching the setting and
restarting the retrievers moves a store from one method to the other.

During a rolling deploy old and new retrievers hold two settings. The method to build is therefore decided
in the database (migration ``241_vector_index_decision.sql``, :func:`decide_method`): the newest setting wins,
newest meaning held by the retriever that began maintaining last (database time), so the new pods take over and
the old ones, until they leave, build nothing (they log that they defer). A decision no retriever holding it
has confirmed for :data:`STALE_AFTER_INTERVALS` maintenance intervals (its retrievers are gone) is taken over
by whoever runs next. An old retriever restarted mid-deploy counts as newer and may win once; the index then
returns to the new setting when that retriever leaves. The query side needs no switch: a
search sets both methods' parameters and PostgreSQL uses the index the table has
(:func:`services.retriever.engine.vector.search.nearest_chunks_settings`).
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field
from datetime import datetime

import asyncpg

from services.retriever.engine.jobs import ANN_MAINTENANCE_LOCK, advisory_session
from services.retriever.engine.vector.tables import VectorIndex, hnsw_index_sql, ivfflat_index_name, ivfflat_index_sql
from shared.periodic import run_every
from shared.settings import DEFAULT_IVFFLAT_PROBES, AnnMethod, DatabaseSettings

log = logging.getLogger(__name__)

#: A decision on the method that no retriever holding it has confirmed for this many maintenance intervals is
#: taken over by a retriever with another setting (the ones holding it have gone).
STALE_AFTER_INTERVALS = 3


@dataclass(frozen=True)
class AnnIndex:
    """An HNSW or IVFFlat index on a vector table, as the catalogue has it."""

    name: str
    method: AnnMethod
    valid: bool
    lists: int | None = None


@dataclass(frozen=True)
class AnnPlan:
    """What :func:`maintain_ann_index` does: drop ``drop_first`` (invalid leftovers), build ``build`` (SQL),
    then drop ``drop_after`` (what the built or already present index replaces)."""

    drop_first: list[str] = field(default_factory=list)
    build: str | None = None
    drop_after: list[str] = field(default_factory=list)
    deferred_to: AnnMethod | None = None
    """Set when nothing was done because a newer setting decided this method (:func:`decide_method`)."""

    @property
    def empty(self) -> bool:
        return not (self.drop_first or self.build or self.drop_after)


async def decide_method(conn: asyncpg.Connection, mine: AnnMethod, since: datetime | None, stale_s: float) -> AnnMethod:
    """The method the vector table should have: ``mine`` (recorded as decided) when nothing is recorded, when the
    record agrees, when this retriever began maintaining (``since``; None: now) after the record's newest holder
    did, or when no holder has confirmed it for ``stale_s`` seconds; else the recorded one. Called under the
    maintenance lock."""
    row = await conn.fetchrow("SELECT method, since, confirmed_at, now() AS now FROM vector_index_decision")
    started = since if since is not None else await conn.fetchval("SELECT now()")
    if row is not None and row["method"] != mine:
        newer = started > row["since"]
        stale = (row["now"] - row["confirmed_at"]).total_seconds() > stale_s
        if not (newer or stale):
            return "ivfflat" if row["method"] == "ivfflat" else "hnsw"
        log.info(
            "the vector index method changes with this retriever's setting",
            extra={"from": row["method"], "to": mine, "why": "newer setting" if newer else "decision not confirmed"},
        )
    await conn.execute(
        """INSERT INTO vector_index_decision (method, since, confirmed_at) VALUES ($1, $2, now())
           ON CONFLICT (one) DO UPDATE SET method = EXCLUDED.method, confirmed_at = now(),
               since = CASE WHEN vector_index_decision.method = EXCLUDED.method
                            THEN greatest(vector_index_decision.since, EXCLUDED.since) ELSE EXCLUDED.since END""",
        mine,
        started,
    )
    return mine


def auto_lists(rows: int) -> int:
    """IVFFlat lists for ``rows`` vectors, as pgvector advises: rows / 1,000 up to 10^6 rows, sqrt(rows) past it."""
    return max(1, rows // 1000) if rows <= 1_000_000 else math.isqrt(rows)


def plan(index: VectorIndex, db: DatabaseSettings, rows: int, present: list[AnnIndex]) -> AnnPlan:
    """The changes that bring ``index``'s table (``rows`` vectors, ``present`` indexes) to the configured method."""
    table = index.table_name
    invalid = [i.name for i in present if not i.valid]
    valid = [i for i in present if i.valid]
    if db.vector_index == "hnsw":
        others = [i.name for i in valid if i.method != "hnsw"]
        if any(i.method == "hnsw" for i in valid):
            return AnnPlan(invalid, None, others)
        return AnnPlan(invalid, hnsw_index_sql(table, db, index.precision, concurrently=True), others)
    ivf = [i for i in valid if i.method == "ivfflat"]
    if rows < db.ivfflat_min_rows:
        return AnnPlan(invalid)  # too few vectors to train on: exact search, or the HNSW index left from before
    wanted = db.ivfflat_lists or auto_lists(rows)
    current = max(ivf, key=lambda i: i.lists or 0) if ivf else None
    if current is not None and current.lists is not None:
        due = current.lists != wanted if db.ivfflat_lists else wanted >= db.ivfflat_retrain_growth * current.lists
        if not due:
            return AnnPlan(invalid, None, [i.name for i in valid if i is not current])
    keep = ivfflat_index_name(table, wanted)
    return AnnPlan(
        invalid,
        ivfflat_index_sql(table, index.precision, wanted, concurrently=True),
        [i.name for i in valid if i.name != keep],
    )


async def ann_indexes(conn: asyncpg.Connection | asyncpg.Pool, table: str) -> list[AnnIndex]:
    """The HNSW and IVFFlat indexes on ``table`` (IVFFlat with its lists)."""
    rows = await conn.fetch(
        """SELECT c.relname, a.amname, i.indisvalid, c.reloptions
           FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_am a ON a.oid = c.relam
           WHERE i.indrelid = $1::regclass AND a.amname IN ('hnsw', 'ivfflat')""",
        table,
    )
    out = []
    for r in rows:
        options = dict(o.split("=", 1) for o in r["reloptions"] or [])
        lists = int(options.get("lists", 100)) if r["amname"] == "ivfflat" else None  # 100: pgvector's default
        out.append(AnnIndex(r["relname"], r["amname"], bool(r["indisvalid"]), lists))
    return out


def probes_for(lists: int | None, db: DatabaseSettings) -> int:
    """IVFFlat lists a query searches: ``db.ivfflat_probes`` when set, else ``db.ivfflat_probe_share`` of the
    index's ``lists`` (at least one); :data:`DEFAULT_IVFFLAT_PROBES` where no IVFFlat index is known (then no
    search reads the setting)."""
    if db.ivfflat_probes:
        return db.ivfflat_probes
    if not lists:
        return DEFAULT_IVFFLAT_PROBES
    return max(1, math.ceil(db.ivfflat_probe_share * lists - 1e-9))


async def ivfflat_lists(conn: asyncpg.Connection | asyncpg.Pool, table: str) -> int | None:
    """The lists of ``table``'s valid IVFFlat index (the larger while a retrained one stands beside the old one),
    or None when it has none."""
    lists = [i.lists for i in await ann_indexes(conn, table) if i.method == "ivfflat" and i.valid and i.lists]
    return max(lists) if lists else None


async def live_probes(conn: asyncpg.Connection | asyncpg.Pool, table: str, db: DatabaseSettings) -> int:
    """:func:`probes_for` the lists of ``table``'s IVFFlat index as the catalogue has them now."""
    return probes_for(await ivfflat_lists(conn, table), db)


class IvfflatProbes:
    """The probes a retriever's searches use: :func:`probes_for` the live index's lists, read again every
    ``every_s`` seconds (a retrain multiplies the lists; a search-only retriever reads them on its replica)."""

    def __init__(self, db: DatabaseSettings, every_s: float = 60.0) -> None:
        self.db = db
        self.every_s = every_s
        self.value = probes_for(None, db)
        self._read_at: float | None = None

    async def current(self, pool: asyncpg.Pool, table: str) -> int:
        if self.db.ivfflat_probes:
            return self.db.ivfflat_probes
        now = time.monotonic()
        if self._read_at is None or now - self._read_at >= self.every_s:
            self.value = await live_probes(pool, table, self.db)
            self._read_at = now
        return self.value


async def _rows(conn: asyncpg.Connection, table: str) -> int:
    """The table's rows: the planner's count when the table has been analysed, else counted."""
    estimate = await conn.fetchval("SELECT reltuples::bigint FROM pg_class WHERE oid = $1::regclass", table)
    if estimate is not None and estimate >= 0:
        return int(estimate)
    return int(await conn.fetchval(f"SELECT count(*) FROM {table}"))


async def carry_out(conn: asyncpg.Connection, todo: AnnPlan) -> None:
    """Drop, build and drop again as ``todo`` says (each ``CONCURRENTLY``: writes and searches go on)."""
    for name in todo.drop_first:
        await conn.execute(f'DROP INDEX CONCURRENTLY IF EXISTS "{name}"')
    if todo.build:
        await conn.execute(todo.build)
    for name in todo.drop_after:
        await conn.execute(f'DROP INDEX CONCURRENTLY IF EXISTS "{name}"')


async def set_build_memory(conn: asyncpg.Connection, maintenance_work_mem: str) -> None:
    """The session's ``maintenance_work_mem`` for an index build (a bound value, not formatted into SQL)."""
    await conn.execute("SELECT set_config('maintenance_work_mem', $1, false)", maintenance_work_mem)


async def maintain_ann_index(
    pool: asyncpg.Pool,
    index: VectorIndex,
    db: DatabaseSettings,
    *,
    maintenance_work_mem: str | None = None,
    since: datetime | None = None,
) -> AnnPlan | None:
    """Bring ``index``'s table to the configured index (:func:`plan`), building it with ``maintenance_work_mem``
    (default ``db.ann_build_memory``; unset: the server's); returns what was done, or None when
    another replica holds the maintenance lock. Builds run concurrently with writes and searches and without
    a statement timeout (an HNSW build over 10^6 vectors takes many minutes). ``since``: when this retriever
    began maintaining (database time; None: now, a newest setting): a retriever whose setting is older than the
    decided one does nothing (:func:`decide_method`)."""
    async with advisory_session(pool, ANN_MAINTENANCE_LOCK) as conn:
        if conn is None:
            return None
        decided = await decide_method(conn, db.vector_index, since, STALE_AFTER_INTERVALS * db.ann_maintain_every_s)
        if decided != db.vector_index:
            log.warning(
                "vector index left as a newer retriever setting decided (this retriever's setting is older)",
                extra={"table": index.table_name, "decided": decided, "setting": db.vector_index},
            )
            return AnnPlan(deferred_to=decided)
        await conn.execute("SET statement_timeout = 0")
        if memory := maintenance_work_mem or db.ann_build_memory:
            await set_build_memory(conn, memory)
        try:
            todo = plan(index, db, await _rows(conn, index.table_name), await ann_indexes(conn, index.table_name))
            if todo.build:
                log.info("building the vector index", extra={"table": index.table_name, "sql": todo.build})
            await carry_out(conn, todo)
            if not todo.empty:
                log.info(
                    "vector index maintained",
                    extra={
                        "table": index.table_name,
                        "built": todo.build,
                        "dropped": todo.drop_first + todo.drop_after,
                    },
                )
            return todo
        finally:
            await conn.execute("RESET statement_timeout; RESET maintenance_work_mem")


async def maintain_forever(pool: asyncpg.Pool, index: VectorIndex, db: DatabaseSettings) -> None:
    """:func:`maintain_ann_index` now and every ``db.ann_maintain_every_s`` seconds until cancelled; a failure
    is logged and retried next time. The retriever's setting dates from the first run (database time)."""
    began: list[datetime] = []

    async def maintain() -> None:
        if not began:
            began.append(await pool.fetchval("SELECT now()"))
        await maintain_ann_index(pool, index, db, since=began[0])

    await run_every(db.ann_maintain_every_s, maintain, failure="vector index maintenance failed", log=log)
