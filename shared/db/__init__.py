"""PostgreSQL access: the asyncpg pool (with pgvector types) and numbered SQL migrations."""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from importlib import resources

import asyncpg
from pgvector.asyncpg import register_vector

from shared.settings import DatabaseSettings

log = logging.getLogger(__name__)

_MIGRATION_NAME = re.compile(r"^(\d{3,})_([a-z0-9_]+)\.sql$")
_LOCK_ID = 0x45564944  # 'EVID': one migrator at a time across every service


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str


def list_migrations() -> list[Migration]:
    """Every ``shared/db/migrations/NNN_name.sql``, in order."""
    found: list[Migration] = []
    for entry in resources.files("shared.db.migrations").iterdir():
        m = _MIGRATION_NAME.match(entry.name)
        if m:
            found.append(Migration(int(m.group(1)), m.group(2), entry.read_text("utf-8")))
    found.sort(key=lambda mig: mig.version)
    versions = [mig.version for mig in found]
    if len(set(versions)) != len(versions):
        raise RuntimeError(f"two migrations share a number: {versions}")
    return found


async def migrate(url: str) -> list[int]:
    """Apply the migrations not yet applied, each in its own transaction; return their versions."""
    conn: asyncpg.Connection = await asyncpg.connect(url)
    try:
        await conn.execute("SELECT pg_advisory_lock($1)", _LOCK_ID)
        try:
            await conn.execute(
                """CREATE TABLE IF NOT EXISTS schema_migrations (
                       version integer PRIMARY KEY, name text NOT NULL,
                       applied_at timestamptz NOT NULL DEFAULT now())"""
            )
            done = {r["version"] for r in await conn.fetch("SELECT version FROM schema_migrations")}
            applied: list[int] = []
            for mig in list_migrations():
                if mig.version in done:
                    continue
                async with conn.transaction():
                    await conn.execute(mig.sql)
                    await conn.execute(
                        "INSERT INTO schema_migrations (version, name) VALUES ($1, $2)", mig.version, mig.name
                    )
                log.info("applied migration", extra={"version": mig.version, "migration": mig.name})
                applied.append(mig.version)
            return applied
        finally:
            await conn.execute("SELECT pg_advisory_unlock($1)", _LOCK_ID)
    finally:
        await conn.close()


async def _init_connection(conn: asyncpg.Connection) -> None:
    await register_vector(conn)


def effective_statement_timeout(settings: DatabaseSettings, caller_timeout_s: float | None = None) -> float:
    """The statement timeout of a pool in seconds (0: none): the setting, capped by the caller's timeout."""
    limits = [t for t in (settings.statement_timeout_s, caller_timeout_s) if t]
    return min(limits) if limits else 0.0


async def create_pool(
    settings: DatabaseSettings,
    *,
    run_migrations: bool = True,
    caller_timeout_s: float | None = None,
    max_size: int | None = None,
    url: str | None = None,
) -> asyncpg.Pool:
    """A pool whose connections know the ``vector`` type; migrations applied first by default.

    ``url`` connects it elsewhere than ``settings.url`` (a read replica for searches: then without migrations,
    which only the primary takes).

    Every statement on it is bounded by PostgreSQL's ``statement_timeout``
    (:func:`effective_statement_timeout`): a pool that answers a caller waiting ``caller_timeout_s``
    never runs a query longer than that caller waits. Migrations run on their own connection,
    without that limit.
    """
    if run_migrations:
        await migrate(url or settings.url)
    timeout_s = effective_statement_timeout(settings, caller_timeout_s)
    server_settings = {"statement_timeout": str(int(timeout_s * 1000))} if timeout_s else {}
    pool = await asyncpg.create_pool(
        url or settings.url,
        min_size=min(settings.pool_min, max_size or settings.pool_max),
        max_size=max_size or settings.pool_max,
        init=_init_connection,
        server_settings=server_settings,
    )
    assert pool is not None
    return pool


async def reachable(pool: asyncpg.Pool) -> bool:
    """Whether the database answers a trivial query on ``pool`` (a service's readiness check)."""
    return bool(await pool.fetchval("SELECT 1"))
