"""Token buckets shared by every process on the database (``rate_buckets``): the one owner of their SQL.

A bucket is one row: ``tokens`` as of ``updated_at``, refilled at ``rate`` a second up to ``burst`` by the
time since (the database clock, ``clock_timestamp()``, the one clock every replica shares). Each operation is
one statement; the row lock serialises the processes taking from the same bucket. Two ways to take a token:

- :func:`reserve` (pacing: the fetcher's NCBI calls) takes one on credit and returns the balance; a negative
  balance is how long the caller must wait (``-balance / rate`` s) before its call. :func:`give_back` returns
  a reserved token a caller did not use.
- :func:`take` (admission: the gateway's per-key limit) takes one only if one is there, and otherwise leaves
  the bucket as it was and says how long until one will be: a refused request costs the caller nothing.

A row that has been idle long enough to be full again is the same as no row; :func:`prune` deletes those of a
name prefix so per-key buckets do not pile up.
"""

from __future__ import annotations

from shared.db.jobs import Db

_REFILLED = "LEAST($3, b.tokens + GREATEST(0, EXTRACT(EPOCH FROM clock_timestamp() - b.updated_at)) * $2)"

# Refill by the time since the last reservation, take one token on credit, return the balance.
_RESERVE = f"""
INSERT INTO rate_buckets AS b (name, tokens, updated_at) VALUES ($1, $3 - 1, clock_timestamp())
ON CONFLICT (name) DO UPDATE SET tokens = {_REFILLED} - 1, updated_at = clock_timestamp()
RETURNING tokens
"""

# Take a token if the refilled bucket holds one (the row is updated only then: DO UPDATE ... WHERE). The first
# column is the balance left when a token was taken (NULL when refused); the second, read from the statement's
# snapshot, is the bucket's refilled content when refused (for the wait; it may lag a concurrent taker).
_TAKE = f"""
WITH taken AS (
    INSERT INTO rate_buckets AS b (name, tokens, updated_at) VALUES ($1, $3 - 1, clock_timestamp())
    ON CONFLICT (name) DO UPDATE SET tokens = {_REFILLED} - 1, updated_at = clock_timestamp()
    WHERE {_REFILLED} >= 1
    RETURNING tokens
)
SELECT (SELECT tokens FROM taken) AS left_after,
       (SELECT {_REFILLED} FROM rate_buckets b WHERE b.name = $1) AS available
"""


async def reserve(pool: Db, name: str, rate: float, burst: float) -> float:
    """Take one token from the bucket ``name`` (refilled at ``rate`` a second up to ``burst``), on credit if
    need be; the balance left: negative when the token was taken on credit."""
    return float(await pool.fetchval(_RESERVE, name, rate, burst))


async def give_back(pool: Db, name: str) -> None:
    """Give one reserved, unused token back to the bucket ``name``."""
    await pool.execute("UPDATE rate_buckets SET tokens = tokens + 1 WHERE name = $1", name)


async def take(pool: Db, name: str, rate: float, burst: float) -> float:
    """0 when a token of the bucket ``name`` was taken; else the seconds until one will be there (none taken)."""
    row = await pool.fetchrow(_TAKE, name, rate, burst)
    assert row is not None
    if row["left_after"] is not None:
        return 0.0
    available = float(row["available"] if row["available"] is not None else 0.0)
    return max(0.0, 1.0 - available) / rate or 1.0 / rate


async def prune(pool: Db, prefix: str, idle_s: float) -> int:
    """Delete the buckets named ``prefix...`` untouched for ``idle_s`` seconds (full again: as good as absent)."""
    status = await pool.execute(
        """DELETE FROM rate_buckets
           WHERE starts_with(name, $1) AND updated_at < clock_timestamp() - make_interval(secs => $2)""",
        prefix,
        idle_s,
    )
    return int(str(status).rsplit(" ", 1)[-1] or 0)
