"""Issue #40 point 1 on the real stack: a broken model in the embedder for 60 s dead-letters nothing,
turns the embedder not ready (then not live), and everything is embedded exactly once after it.

The model is broken at run time by the test-only fault file (``EVIDENTIA_EMBEDDING_FAULT_FILE``,
:mod:`services.embedder.fault`, set for every test stack in ``conftest.py`` with a short back-off cap and
liveness delay, so recovery and the liveness failure fit the test): while the file exists every call to
the model fails, the known-good probe included, as with a sticky CUDA error. Before this fix the first
failed batch was dead-lettered and committed within a second: a fault held for 60 s, across a dozen
retries of the same batch, is far past anything that could be mistaken for a retry budget.

The fault strikes while work is in flight: the documents are published after the fault begins, and the
test sees the embedder take batches of their chunks during the fault (its batch counter), their chunks
stored (parsed) while none of them has a vector, the embedder's ``/readyz`` answer 503 and then its
``/healthz`` 503. After the fault: the job done, every chunk exactly one vector, every chunk embedded
once (``chunks.embedded`` events), and the dead-letter topics of ``chunks.created`` and
``chunks.embedded`` not one record longer than before.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from shared.kafka.topics import CHUNKS_CREATED, CHUNKS_EMBEDDED, dlq
from shared.models import ParsedDocument
from tests.integration.conftest import Stack
from tests.integration.test_faults import (
    assert_exactly_once,
    assert_side_effects,
    expected_chunks,
    progress,
    publish_job,
    sample,
    service_tails,
    wait_until,
)

# The stack's start-up counts towards its first test, and the fault alone is held 60 s.
pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(1200)]

#: Documents of the sample no test of test_faults.py uses (its slices end at 276).
SLICE = (460, 500)
FAULT_S = 60.0


def docs_of(stack: Stack) -> list[ParsedDocument]:
    reserved = {f"pubmed:{p}" for p in stack.fake.pubmed_ids}
    docs = [d for d in sample()[SLICE[0] : SLICE[1]] if d.document_id not in reserved]
    assert len(docs) >= 20
    return docs


async def _dlq_ends(bootstrap: str) -> dict[str, int]:
    """Records ever written to the dead-letter topics of ``chunks.created`` and ``chunks.embedded`` (one
    partition each, as :func:`shared.kafka.topics.standard_topics` makes them)."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False)
    await consumer.start()
    try:
        tps = [TopicPartition(dlq(CHUNKS_CREATED), 0), TopicPartition(dlq(CHUNKS_EMBEDDED), 0)]
        ends = await consumer.end_offsets(tps)
        return {tp.topic: int(ends[tp]) for tp in tps}
    finally:
        await consumer.stop()


def dlq_ends(stack: Stack) -> dict[str, int]:
    return asyncio.run(_dlq_ends(stack.infra.kafka.bootstrap))


def probe(stack: Stack, path: str) -> int:
    port = stack.services.processes["embedder"].port
    try:
        return httpx.get(f"http://127.0.0.1:{port}{path}", timeout=5.0).status_code
    except httpx.HTTPError:
        return 0


def batches_taken(stack: Stack) -> float:
    """``chunks.created`` batches the embedder took (its ``evidentia_batch_size`` histogram's count)."""
    port = stack.services.processes["embedder"].port
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5.0).text
    pattern = r'^evidentia_batch_size_count\{[^}]*service="embedder"[^}]*topic="chunks\.created"[^}]*\} (\S+)$'
    found = re.search(pattern, text, re.M)
    return float(found.group(1)) if found else 0.0


def model_failures(stack: Stack) -> int:
    return stack.services.processes["embedder"].tail(100_000).count("the model failed (attempt")


@pytest.fixture
def fault_file(stack: Stack) -> Iterator[Path]:
    """The file whose existence breaks the embedder's model (the stack's ``EVIDENTIA_EMBEDDING_FAULT_FILE``,
    set in ``conftest.py`` for every test stack: inert while the file does not exist); removed after."""
    path = Path(stack.env["EVIDENTIA_EMBEDDING_FAULT_FILE"])
    path.unlink(missing_ok=True)
    try:
        yield path
    finally:
        path.unlink(missing_ok=True)


def test_a_broken_model_for_60s_dead_letters_nothing_and_everything_is_embedded_after(
    stack: Stack, fault_file: Path
) -> None:
    docs = docs_of(stack)
    expected = expected_chunks(docs)
    ids = sorted(expected)
    total = sum(expected.values())
    letters_before = dlq_ends(stack)
    failures_before = model_failures(stack)
    batches_before = batches_taken(stack)

    fault_file.touch()
    struck = time.monotonic()
    job_id = publish_job(stack, docs)

    # In flight: the parser stores the chunks and publishes them, the embedder takes them and cannot embed.
    wait_until("the embedder to take batches of the job's chunks", lambda: batches_taken(stack) > batches_before, 60)
    wait_until("the model to fail more than once", lambda: model_failures(stack) - failures_before >= 2, 30)
    wait_until("the embedder to turn not ready", lambda: probe(stack, "/readyz") == 503, 15, 0.2)
    wait_until("the job's chunks to be stored", lambda: (p := progress(stack, ids)) is not None and p.chunks > 0, 60)
    wait_until("the embedder to turn not live", lambda: probe(stack, "/healthz") == 503, FAULT_S, 0.5)
    during = progress(stack, ids)
    assert during is not None and during.chunks > 0 and during.vectors == 0, during
    assert dlq_ends(stack) == letters_before, "a broken model dead-lettered work"
    time.sleep(max(0.0, FAULT_S - (time.monotonic() - struck)))
    held = time.monotonic() - struck

    # Still nothing embedded and nothing dead-lettered at the end of the fault; the same batches retried.
    at_end = progress(stack, ids)
    assert at_end is not None and at_end.vectors == 0, at_end
    assert probe(stack, "/readyz") == 503 and probe(stack, "/healthz") == 503
    retries = model_failures(stack) - failures_before
    assert retries >= 5, f"only {retries} tries of the broken model in {held:.0f}s"

    fault_file.unlink()
    assert_exactly_once(stack, job_id, expected)
    assert_side_effects(stack, expected, redone_at_most=0)
    wait_until("the embedder to be ready again", lambda: probe(stack, "/readyz") == 204, 60, 0.2)
    assert probe(stack, "/healthz") == 200
    assert dlq_ends(stack) == letters_before, f"dead letters after the fault\n{service_tails(stack)}"
    assert held >= FAULT_S and total > 0
