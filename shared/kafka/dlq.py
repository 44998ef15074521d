"""Dead letters as an operator reads and replays them.

Letters are made and sent by :mod:`shared.kafka.dead_letters`; read and replayed here by ``evidentia dlq`` and
the gateway's ``/v1/admin/dlq`` routes (both call the functions here, so there is one owner).

- :func:`letter_pages` reads a dead-letter topic a page at a time (partition by partition, oldest first),
  so a topic of any size is read in bounded memory; :func:`read_letters` lists the first ``limit`` of them.
- :func:`replay` sends chosen letters back to their topic with their original key and headers. A
  truncated letter is completed from the original topic (``topic``/``partition``/``offset``) when
  Kafka still has it, and checked against the SHA-256; one that cannot be completed is refused.
  Each replay is recorded in ``dead_letter_replays`` when a database is given, so a letter is not
  replayed twice by accident (``force`` replays it again).
- :func:`replay_chosen` is what an operator's "replay" does: named letters, or every letter (of an error
  type, not replayed yet) of the topic, paged through: at most ``page_size`` letters are held at a time.

Every Kafka client here connects as the services do (:func:`shared.kafka.security.client_options`: TLS and
SASL from :class:`~shared.settings.KafkaSettings`), so the tools work on a ``SASL_SSL`` cluster too.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRecord, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from pydantic import BaseModel, Field

from shared.events import DeadLetter
from shared.kafka.messages import UNDECODABLE_HEADER
from shared.kafka.security import client_options
from shared.settings import KafkaSettings

REPLAY_HEADER = "evidentia-replayed-from"
PAGE_SIZE = 500  # letters held at once while paging through a topic (each up to dlq_max_payload_bytes)


class LetterView(BaseModel):
    """One dead letter as listed: where it sits in the dead-letter topic, and the letter."""

    dlq_topic: str
    dlq_partition: int
    dlq_offset: int
    letter: DeadLetter
    replayed: bool = Field(False, description="Already sent back to its topic (recorded in the database).")

    @property
    def ref(self) -> str:
        """``partition:offset`` in the dead-letter topic: how a letter is named to show or replay it."""
        return f"{self.dlq_partition}:{self.dlq_offset}"


def parse_ref(ref: str) -> tuple[int, int]:
    """``"0:17"`` or ``"17"`` (partition 0) -> (partition, offset); ValueError otherwise."""
    part, _, off = ref.partition(":") if ":" in ref else ("0", "", ref)
    if not part.strip().isdigit() or not off.strip().isdigit():
        raise ValueError(f"not a dead-letter reference (PARTITION:OFFSET or OFFSET): {ref!r}")
    return int(part), int(off)


async def read_letters(
    kafka: KafkaSettings,
    dlq_topic: str,
    *,
    refs: Sequence[tuple[int, int]] | None = None,
    limit: int = 1000,
    timeout_ms: int = 5000,
) -> list[LetterView]:
    """The letters of ``dlq_topic`` (every partition, oldest first, at most ``limit``), or only ``refs``."""
    out: list[LetterView] = []
    async for page in letter_pages(kafka, dlq_topic, refs=refs, page_size=min(limit, PAGE_SIZE), timeout_ms=timeout_ms):
        out.extend(page[: limit - len(out)])
        if len(out) >= limit:
            break
    return out


async def letter_pages(
    kafka: KafkaSettings,
    dlq_topic: str,
    *,
    refs: Sequence[tuple[int, int]] | None = None,
    page_size: int = PAGE_SIZE,
    timeout_ms: int = 5000,
) -> AsyncIterator[list[LetterView]]:
    """The letters of ``dlq_topic`` in pages of at most ``page_size`` (partition by partition, oldest first),
    or only ``refs``; each partition is read up to its end offset at the time it is reached.

    One partition is assigned at a time and asked for at most ``page_size`` records per fetch, so what is held
    is one page plus the consumer's fetch buffer of that partition, whatever the size of the topic.
    """
    if page_size < 1:
        raise ValueError("page_size must be at least 1")
    partitions = await topic_partitions(kafka, dlq_topic)
    if not partitions:
        return
    wanted = set(refs) if refs is not None else None
    # "earliest", and explicit seeks to the first offsets: with the default "latest" the consumer's own position
    # reset raced seek_to_beginning and sometimes left it at the end (an empty listing).
    consumer = AIOKafkaConsumer(
        **client_options(kafka), enable_auto_commit=False, group_id=None, auto_offset_reset="earliest"
    )
    await consumer.start()
    try:
        page: list[LetterView] = []
        for partition in partitions:
            if wanted is not None and not any(p == partition for p, _ in wanted):
                continue
            tp = TopicPartition(dlq_topic, partition)
            consumer.assign([tp])
            start = (await consumer.beginning_offsets([tp]))[tp]
            end = (await consumer.end_offsets([tp]))[tp]
            consumer.seek(tp, start)
            while start < end and await consumer.position(tp) < end:
                batch = await consumer.getmany(tp, timeout_ms=timeout_ms, max_records=page_size)
                if not batch:
                    break  # nothing more within the timeout: what was read is the answer
                for record in batch.get(tp, []):
                    if record.offset < end and (wanted is None or (partition, record.offset) in wanted):
                        page.append(_view(record))
                        if len(page) >= page_size:
                            yield page
                            page = []
        if page:
            yield page
    finally:
        await consumer.stop()


async def topic_partitions(kafka: KafkaSettings, topic: str) -> list[int]:
    """The partition ids of ``topic`` (empty when it does not exist), from the cluster's metadata."""
    admin = AIOKafkaAdminClient(**client_options(kafka), client_id="evidentia-dlq")
    await admin.start()
    try:
        described = await admin.describe_topics([topic])
    finally:
        await admin.close()
    for entry in described:
        if entry.get("topic") == topic and not entry.get("error_code"):
            return sorted(int(p["partition"]) for p in entry.get("partitions", []))
    return []


def _view(record: ConsumerRecord[Any, Any]) -> LetterView:
    try:
        letter = DeadLetter.model_validate_json(record.value or b"")
    except ValueError as exc:  # a letter written by something else: shown as what it is
        letter = DeadLetter(
            topic="?",
            service="?",
            error_type="UnreadableDeadLetter",
            error=str(exc)[:500],
            attempts=0,
            payload=(record.value or b"").decode("utf-8", "replace")[:4000],
        )
    return LetterView(dlq_topic=record.topic, dlq_partition=record.partition, dlq_offset=record.offset, letter=letter)


async def fetch_original(kafka: KafkaSettings, letter: DeadLetter) -> bytes | None:
    """The original record's body from its own topic, if Kafka still has it and it matches the letter."""
    if letter.partition is None or letter.offset is None:
        return None
    consumer = AIOKafkaConsumer(**client_options(kafka), enable_auto_commit=False, group_id=None)
    await consumer.start()
    try:
        tp = TopicPartition(letter.topic, letter.partition)
        consumer.assign([tp])
        start = (await consumer.beginning_offsets([tp]))[tp]
        if letter.offset < start:
            return None  # gone by retention
        consumer.seek(tp, letter.offset)
        batch = await consumer.getmany(tp, timeout_ms=5000, max_records=1)
        for record in batch.get(tp, []):
            if record.offset == letter.offset:
                body = record.value or b""
                if letter.payload_sha256 and hashlib.sha256(body).hexdigest() != letter.payload_sha256:
                    return None
                return bytes(body)
        return None
    finally:
        await consumer.stop()


# ------------------------------------------------------------------------------------------ replay


@dataclass
class ReplayOutcome:
    ref: str
    topic: str
    status: str  # "replayed", "skipped" (replayed before), "refused" (original not available), "would replay"
    detail: str = ""


async def replay(
    kafka: KafkaSettings,
    views: Sequence[LetterView],
    *,
    pool: Any | None = None,
    force: bool = False,
) -> list[ReplayOutcome]:
    """Send ``views`` back to their original topics (original key and headers, plus a replay header)."""
    producer = _producer(kafka)
    await producer.start()
    try:
        return await _send_back(producer, kafka, views, pool=pool, force=force)
    finally:
        await producer.stop()


async def replay_chosen(
    kafka: KafkaSettings,
    dlq_topic: str,
    *,
    pool: Any | None = None,
    refs: Sequence[str] = (),
    every: bool = False,
    error_type: str | None = None,
    force: bool = False,
    dry_run: bool = False,
    page_size: int = PAGE_SIZE,
) -> AsyncIterator[ReplayOutcome]:
    """Replay the letters of ``dlq_topic`` an operator chose (as :func:`select` chooses them), a page at a time.

    Named ``refs`` are read alone (LookupError naming any that does not exist); ``every`` pages through the
    whole topic, holding at most ``page_size`` letters at once. ``dry_run`` yields ``"would replay"``
    outcomes and sends nothing. Outcomes are yielded as each page is done.
    """
    if refs:
        wanted = [parse_ref(r) for r in refs]
        views = await read_letters(kafka, dlq_topic, refs=wanted, limit=len(wanted))
        pages: AsyncIterator[list[LetterView]] = _one_page(select(views, refs=refs))
    elif every:
        pages = letter_pages(kafka, dlq_topic, page_size=page_size)
    else:
        select([], every=False)  # raises the ValueError that says what to name
        return
    producer = None if dry_run else _producer(kafka)
    if producer is not None:
        await producer.start()
    try:
        async for page in pages:
            if pool is not None:
                page = await mark_replayed(pool, page)
            chosen = page if refs else select(page, every=True, error_type=error_type, include_replayed=force)
            if producer is None:
                for view in chosen:
                    yield ReplayOutcome(view.ref, view.letter.topic, "would replay", f"key {view.letter.key}")
                continue
            for outcome in await _send_back(producer, kafka, chosen, pool=pool, force=force):
                yield outcome
    finally:
        if producer is not None:
            await producer.stop()


async def _one_page(views: list[LetterView]) -> AsyncIterator[list[LetterView]]:
    yield views


def _producer(kafka: KafkaSettings) -> AIOKafkaProducer:
    return AIOKafkaProducer(
        **client_options(kafka), acks="all", enable_idempotence=True, max_request_size=kafka.max_request_size
    )


async def _send_back(
    producer: AIOKafkaProducer,
    kafka: KafkaSettings,
    views: Sequence[LetterView],
    *,
    pool: Any | None,
    force: bool,
) -> list[ReplayOutcome]:
    outcomes: list[ReplayOutcome] = []
    done = await replayed_refs(pool, views) if pool is not None else set()
    for view in views:
        letter = view.letter
        if (view.dlq_topic, view.dlq_partition, view.dlq_offset) in done and not force:
            outcomes.append(ReplayOutcome(view.ref, letter.topic, "skipped", "replayed before (use force)"))
            continue
        body = letter.original()
        if body is None:
            body = await fetch_original(kafka, letter)
        if body is None:
            outcomes.append(
                ReplayOutcome(
                    view.ref,
                    letter.topic,
                    "refused",
                    "the letter holds only part of the event and the original is no longer in its topic",
                )
            )
            continue
        headers = [(k, v.encode()) for k, v in letter.headers.items() if k not in (REPLAY_HEADER, UNDECODABLE_HEADER)]
        headers.append((REPLAY_HEADER, f"{view.dlq_topic}:{view.ref}".encode()))
        key = letter.key.encode() if letter.key is not None else None
        await producer.send_and_wait(letter.topic, body, key=key, headers=headers)
        if pool is not None:
            await pool.execute(
                """INSERT INTO dead_letter_replays (dlq_topic, dlq_partition, dlq_offset, topic)
                   VALUES ($1, $2, $3, $4)
                   ON CONFLICT (dlq_topic, dlq_partition, dlq_offset)
                   DO UPDATE SET replayed_at = now(), times = dead_letter_replays.times + 1""",
                view.dlq_topic,
                view.dlq_partition,
                view.dlq_offset,
                letter.topic,
            )
        outcomes.append(ReplayOutcome(view.ref, letter.topic, "replayed"))
    return outcomes


async def replayed_refs(pool: Any, views: Sequence[LetterView]) -> set[tuple[str, int, int]]:
    """Which of ``views`` were replayed before (``dead_letter_replays``)."""
    if not views:
        return set()
    # Only the rows of these letters (a page), not every replay ever recorded for the topic.
    rows = await pool.fetch(
        """SELECT r.dlq_topic, r.dlq_partition, r.dlq_offset
           FROM dead_letter_replays r
           JOIN unnest($1::text[], $2::int[], $3::bigint[]) AS v(topic, part, off)
             ON (r.dlq_topic, r.dlq_partition, r.dlq_offset) = (v.topic, v.part, v.off)""",
        [v.dlq_topic for v in views],
        [v.dlq_partition for v in views],
        [v.dlq_offset for v in views],
    )
    return {(r["dlq_topic"], int(r["dlq_partition"]), int(r["dlq_offset"])) for r in rows}


async def mark_replayed(pool: Any, views: list[LetterView]) -> list[LetterView]:
    """``views`` with ``replayed`` set from the database."""
    done = await replayed_refs(pool, views)
    for v in views:
        v.replayed = (v.dlq_topic, v.dlq_partition, v.dlq_offset) in done
    return views


def dlq_topic_of(topic: str) -> str:
    """``documents.fetched`` or ``documents.fetched.dlq`` -> ``documents.fetched.dlq``."""
    topic = topic.strip()
    return topic if topic.endswith(".dlq") else f"{topic}.dlq"


def select(
    views: Sequence[LetterView],
    *,
    refs: Sequence[str] = (),
    every: bool = False,
    error_type: str | None = None,
    include_replayed: bool = False,
) -> list[LetterView]:
    """The letters an operator chose: by ``refs`` (``PARTITION:OFFSET`` or ``OFFSET``), or ``every`` one
    (optionally only of ``error_type``; already replayed ones only with ``include_replayed``)."""
    if refs:
        wanted = {parse_ref(r) for r in refs}
        chosen = [v for v in views if (v.dlq_partition, v.dlq_offset) in wanted]
        missing = wanted - {(v.dlq_partition, v.dlq_offset) for v in chosen}
        if missing:
            raise LookupError("no such dead letter: " + ", ".join(f"{p}:{o}" for p, o in sorted(missing)))
        return chosen
    if not every:
        raise ValueError("name the letters to replay (PARTITION:OFFSET ...) or ask for all of them")
    return [
        v
        for v in views
        if (error_type is None or v.letter.error_type == error_type) and (include_replayed or not v.replayed)
    ]


def summary(view: LetterView) -> dict[str, Any]:
    """One line of a listing: where the letter is, where it came from, why."""
    letter = view.letter
    return {
        "ref": view.ref,
        "topic": letter.topic,
        "partition": letter.partition,
        "offset": letter.offset,
        "key": letter.key,
        "service": letter.service,
        "error_type": letter.error_type,
        "error": letter.error[:300],
        "attempts": letter.attempts,
        "payload_bytes": letter.payload_bytes,
        "payload_truncated": letter.payload_truncated,
        "created_at": letter.created_at.isoformat(),
        "replayed": view.replayed,
    }
