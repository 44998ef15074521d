"""A database that refuses writes for longer than the delivery-attempt limit, over the real stack (issue 40).

Clients of a primary demoted in a switchover see what ``default_transaction_read_only = on`` makes every
session see: each write fails with SQLSTATE 25006 (``ReadOnlySQLTransactionError``). That is an outage of the
database, not an error of the event: the services retry it with back-off and without limit
(``shared.kafka.errors.INFRASTRUCTURE_SQLSTATES``), dead-letter nothing, and store everything exactly once after it
clears. Before, each event was dead-lettered after ``max_delivery_attempts`` (three) failures.

The fault is proved to have struck work in flight, and to have outlasted the attempt limit: the parser (and the
retriever, when it had vectors to store) logged retries of the same events past that limit with 25006.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import asyncpg
import pytest

from devstack.postgres import LocalPostgres
from shared.kafka.topics import CHUNKS_CREATED, CHUNKS_EMBEDDED, DOCUMENTS_FETCHED
from tests.integration.conftest import Stack
from tests.integration.dead_letters import read_dead_letters
from tests.integration.test_faults import (
    assert_exactly_once,
    assert_side_effects,
    db_now,
    expected_chunks,
    progress,
    publish_job,
    sample,
    settings_of,
    vectors_since,
    wait_job,
    wait_until,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]

#: pytest-timeout counts fixture set-up too: starting the services on a busy 2-core machine takes minutes, and
#: after the fault the back-off (up to EVIDENTIA_KAFKA_RETRY_BACKOFF_MAX_S, 30 s) delays the first retry.
TEST_TIMEOUT_S = 900

#: A slice of the sample no other fault test uses (tests/integration/test_faults.py takes 0-276).
SLICE = (440, 500)
#: The fault lasts at least this long, and at most until every busy service retried past the attempt limit.
MIN_FAULT_S = 20.0
MAX_FAULT_S = 90.0
#: How long the job may take once the fault clears: the first retry waits out the back-off reached during the
#: fault (up to 30 s), and the embedder shares two busy cores.
JOB_WAIT_S = 480.0


async def _superuser(postgres: LocalPostgres, *statements: str) -> None:
    """Run ``statements`` as the superuser over the server's administration socket."""
    conn = await asyncpg.connect(
        host=str(postgres.socket_dir), port=postgres.port, user="postgres", database="postgres", timeout=10
    )
    try:
        for sql in statements:
            await conn.execute(sql)
    finally:
        await conn.close()


def set_read_only(postgres: LocalPostgres, on: bool) -> None:
    """Every transaction of every session read-only (or not), at once: ``ALTER SYSTEM`` and a reload, which
    open sessions take too (their own ``SET`` would win, and none makes one)."""
    value = "SET default_transaction_read_only = on" if on else "RESET default_transaction_read_only"
    asyncio.run(
        _superuser(
            postgres, "SET default_transaction_read_only = off", f"ALTER SYSTEM {value}", "SELECT pg_reload_conf()"
        )
    )


def log_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def retries(path: Path, offset: int) -> list[dict[str, object]]:
    """The "handler failed; retrying" lines a service logged after ``offset`` (JSON: topic, attempt, transient,
    error)."""
    with path.open("rb") as fh:
        fh.seek(offset)
        lines = fh.read().splitlines()
    found = []
    for line in lines:
        if b"handler failed; retrying" in line:
            try:
                found.append(json.loads(line))
            except ValueError:
                continue
    return found


def retries_since(path: Path, offset: int, error_type: str) -> list[int]:
    """The attempt numbers of the retries logged after ``offset`` whose error is ``error_type``."""
    return [int(str(r["attempt"])) for r in retries(path, offset) if str(r.get("error", "")).startswith(error_type)]


@pytest.mark.timeout(TEST_TIMEOUT_S)
@pytest.mark.disruptive
def test_a_read_only_database_for_longer_than_the_attempt_limit_dead_letters_nothing(stack: Stack) -> None:
    reserved = {f"pubmed:{p}" for p in stack.fake.pubmed_ids}
    docs = [d for d in sample()[SLICE[0] : SLICE[1]] if d.document_id not in reserved]
    expected = expected_chunks(docs)
    ids = sorted(expected)
    total_chunks = sum(expected.values())
    limit = settings_of(stack).kafka.max_delivery_attempts
    postgres = stack.infra.postgres
    logs = {name: stack.services.processes[name].log_path for name in ("parser", "retriever")}
    offsets = {name: log_size(path) for name, path in logs.items()}

    job_id = publish_job(stack, docs)
    wait_until("the parser's first document", lambda: (p := progress(stack, ids)) is not None and p.documents >= 1, 90)
    set_read_only(postgres, True)
    try:
        struck = time.monotonic()
        time.sleep(1.0)  # sessions take the reload at their next statement; a transaction under way may commit
        before = progress(stack, ids)
        assert before is not None
        # Work in flight when the fault struck: documents still to store, and chunks still to get vectors.
        assert before.documents < len(ids), f"the parser had stored everything before the fault: {before}"
        assert before.vectors < total_chunks, before
        busy = ["parser"] + (["retriever"] if before.chunks > before.vectors else [])

        def past_the_limit() -> bool:
            return all(
                max(retries_since(logs[name], offsets[name], "ReadOnlySQLTransactionError"), default=0) > limit
                for name in busy
            )

        wait_until(f"{busy} to retry past the attempt limit ({limit})", past_the_limit, MAX_FAULT_S, interval=0.5)
        time.sleep(max(0.0, MIN_FAULT_S - (time.monotonic() - struck)))
        during = progress(stack, ids)
        assert during is not None and during.documents == before.documents, (before, during)  # nothing written
    finally:
        set_read_only(postgres, False)
    cleared_at = db_now(stack)

    bootstrap = stack.infra.kafka.bootstrap
    letters = asyncio.run(
        read_dead_letters(bootstrap, [DOCUMENTS_FETCHED, CHUNKS_CREATED, CHUNKS_EMBEDDED], job_id, 1, 5)
    )
    assert letters == [], [(x.topic, x.key, x.error_type, x.attempts) for x in letters]
    wait_job(stack, job_id, JOB_WAIT_S)
    assert_exactly_once(stack, job_id, expected)
    # Written after the fault cleared: what the fault held back was retried, not dropped.
    assert vectors_since(stack, ids, cleared_at) >= total_chunks - during.vectors > 0
    assert_side_effects(stack, expected, redone_at_most=total_chunks - before.vectors)
    letters = asyncio.run(
        read_dead_letters(bootstrap, [DOCUMENTS_FETCHED, CHUNKS_CREATED, CHUNKS_EMBEDDED], job_id, 1, 2)
    )
    assert letters == [], [(x.topic, x.key, x.error_type, x.attempts) for x in letters]
