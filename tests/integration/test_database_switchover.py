"""A PostgreSQL switchover mid-ingest: the primary stopped, its streaming standby promoted (issue 40).

A stack of its own (its own Kafka, a primary and a real standby cloned with ``pg_basebackup -R``, and the
ingest path's services: parser, embedder, retriever), because the session stack's services must keep their
one database. The services are given one connection URL naming both servers with
``target_session_attrs=read-write`` (``devstack.postgres.failover_url``), as a production deployment names a
primary and its standbys: each new connection goes to whichever server takes writes, so the services find
the promoted standby by themselves, without a restart or a new setting (asserted: same processes throughout).

While no server takes writes (the primary stopped, the standby not yet promoted), every write fails with an
infrastructure error (connection refused; a standby refused as not read-write): retried without limit. Ends
with :func:`~tests.integration.test_faults.assert_exactly_once` on the new primary: every document stored
once, every chunk one vector, no failure, and no dead letter.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from devstack.common import free_port
from devstack.kafka import LocalKafka
from devstack.postgres import LocalPostgres, failover_url
from devstack.processes import ServiceStack
from shared.kafka.topics import CHUNKS_CREATED, CHUNKS_EMBEDDED, DOCUMENTS_FETCHED
from tests.fakes.eutils_server import FakeEutils
from tests.integration.conftest import Infra, Stack, throwaway_postgres
from tests.integration.dead_letters import read_dead_letters
from tests.integration.test_database_faults import log_size, retries
from tests.integration.test_faults import (
    assert_exactly_once,
    assert_side_effects,
    db_now,
    expected_chunks,
    progress,
    publish_job,
    sample,
    vectors_since,
    wait_until,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]

#: pytest-timeout counts fixture set-up too: starting the services on a busy 2-core machine takes minutes, and
#: after the fault the back-off (up to EVIDENTIA_KAFKA_RETRY_BACKOFF_MAX_S, 30 s) delays the first retry.
TEST_TIMEOUT_S = 900

#: Its own database, so any slice would do; one no other fault test takes keeps the ids apart in logs.
SLICE = (380, 440)
#: How long no server takes writes: the old primary stopped, the standby not yet promoted (an operator's or
#: an operator's controller's reaction time). Longer than the attempt limit's back-offs (0.5 + 1 s).
NO_PRIMARY_S = 8.0
#: The services of the ingest path (``evidentia ingest --jsonl`` publishes documents.fetched itself).
SERVICES = ("parser", "embedder", "retriever")


@dataclass
class Switchover:
    kafka: LocalKafka
    primary: LocalPostgres
    standby: LocalPostgres
    services: ServiceStack
    fake: FakeEutils
    env: dict[str, str]
    root: Path

    def stack(self, postgres: LocalPostgres) -> Stack:
        """The fault-test helpers' view of this stack, reading and writing ``postgres`` (the current primary)."""
        return Stack(Infra(self.kafka, postgres, self.root), self.services, self.fake, self.env)


@pytest.fixture(scope="module")
def switchover(fake_eutils: FakeEutils) -> Iterator[Switchover]:
    from shared.db import migrate
    from shared.kafka.topic_admin import ensure_topics
    from shared.kafka.topics import standard_topics

    root = Path(tempfile.mkdtemp(prefix="evidentia-switchover-"))
    os.chmod(root, 0o755)
    kafka = LocalKafka(root / "kafka", port=free_port(), controller_port=free_port())
    kafka.ensure_libs()
    kafka.start(timeout=120)
    try:
        with throwaway_postgres("evidentia-switchover-primary-") as primary:
            asyncio.run(migrate(primary.url))
            with throwaway_postgres("evidentia-switchover-standby-", replica_of=primary) as standby:
                assert standby.is_standby()
                asyncio.run(ensure_topics(kafka.bootstrap, standard_topics(3)))
                env = dict(os.environ)
                env.update(
                    {
                        "EVIDENTIA_KAFKA_BOOTSTRAP": kafka.bootstrap,
                        "EVIDENTIA_DATABASE_URL": failover_url(primary, standby),
                        "EVIDENTIA_KAFKA_TOPIC_PARTITIONS": "3",
                        "EVIDENTIA_LOG_FORMAT": "json",
                    }
                )
                env.pop("ANTHROPIC_API_KEY", None)
                services = ServiceStack(
                    log_dir=root / "logs", env=env, services=SERVICES, ports={n: free_port() for n in SERVICES}
                )
                services.start(timeout=300)
                try:
                    yield Switchover(kafka, primary, standby, services, fake_eutils, env, root)
                finally:
                    services.stop()
    finally:
        kafka.stop()
        shutil.rmtree(root, ignore_errors=True)


@pytest.mark.timeout(TEST_TIMEOUT_S)
def test_a_switchover_mid_ingest_stores_everything_once_on_the_new_primary(switchover: Switchover) -> None:
    reserved = {f"pubmed:{p}" for p in switchover.fake.pubmed_ids}
    docs = [d for d in sample()[SLICE[0] : SLICE[1]] if d.document_id not in reserved]
    expected = expected_chunks(docs)
    ids = sorted(expected)
    total_chunks = sum(expected.values())
    old, new = switchover.stack(switchover.primary), switchover.stack(switchover.standby)
    pids = {name: p.pid for name, p in switchover.services.processes.items()}
    parser_log = switchover.services.processes["parser"].log_path

    job_id = publish_job(old, docs)
    wait_until("the parser's first document", lambda: (p := progress(old, ids)) is not None and p.documents >= 1, 120)
    # A planned switchover: the primary stops (a fast shutdown sends the standby every WAL record first), then
    # the standby is promoted.
    offset = log_size(parser_log)
    switchover.primary.stop()
    time.sleep(NO_PRIMARY_S)
    before = progress(new, ids)  # read on the standby, which has replayed all the old primary wrote
    assert before is not None
    assert before.documents < len(ids), f"the parser had stored everything before the switchover: {before}"
    assert before.vectors < total_chunks, before
    # The parser kept trying while no server took writes, each failure taken for an outage.
    tried = retries(parser_log, offset)
    assert tried and all(r["transient"] is True for r in tried), tried[:5]
    switchover.standby.promote()
    assert not switchover.standby.is_standby()
    promoted_at = db_now(new)

    assert_exactly_once(new, job_id, expected)
    letters = asyncio.run(
        read_dead_letters(
            switchover.kafka.bootstrap, [DOCUMENTS_FETCHED, CHUNKS_CREATED, CHUNKS_EMBEDDED], job_id, 1, 5
        )
    )
    assert letters == [], [(x.topic, x.key, x.error_type, x.attempts) for x in letters]
    table_rows = progress(new, ids)
    assert table_rows is not None and table_rows.vectors == total_chunks
    # Written on the promoted standby after the switchover: the work in flight went on there.
    assert vectors_since(new, ids, promoted_at) >= total_chunks - before.vectors > 0
    assert_side_effects(new, expected, redone_at_most=total_chunks - before.vectors)
    # Found by themselves: the same processes, never restarted or reconfigured, and the old primary still down.
    assert {name: p.pid for name, p in switchover.services.processes.items()} == pids
    assert all(p.alive() for p in switchover.services.processes.values())
    assert not switchover.primary.is_running()
