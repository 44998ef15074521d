"""Dead letters: how one is made from a failed record, and how an operator reads and replays them.

Made by :func:`shared.broker.publish_dead_letters`; read and replayed by ``evidentia dlq`` and the
gateway's ``/v1/admin/dlq`` routes (both call the functions here, so there is one owner).

- :func:`make_letter` carries the original body once (JSON as JSON, see :class:`DeadLetter`), cut
  beyond ``dlq_max_payload_bytes`` with the whole body's size and SHA-256, plus topic, partition,
  offset, key and headers.
- :func:`read_letters` lists a dead-letter topic (every partition, from the start).
- :func:`replay` sends chosen letters back to their topic with their original key and headers. A
  truncated letter is completed from the original topic (``topic``/``partition``/``offset``) when
  Kafka still has it, and checked against the SHA-256; one that cannot be completed is refused.
  Each replay is recorded in ``dead_letter_replays`` when a database is given, so a letter is not
  replayed twice by accident (``force`` replays it again).
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRecord, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from pydantic import BaseModel, Field

from shared.events import DeadLetter

REPLAY_HEADER = "evidentia-replayed-from"
UNDECODABLE_HEADER = "evidentia-undecodable"


def _header_text(value: bytes | None) -> str:
    return (value or b"").decode("utf-8", "replace")


def _trace_of(data: Any) -> str | None:
    trace = data.get("trace_id") if isinstance(data, dict) else None
    return trace if isinstance(trace, str) and 0 < len(trace) <= 64 else None


def make_letter(
    record: ConsumerRecord[Any, Any],
    *,
    service: str,
    exc: BaseException,
    attempts: int,
    max_payload_bytes: int,
) -> DeadLetter:
    """The dead letter of ``record``, which failed with ``exc`` after ``attempts`` attempts."""
    raw = record.value
    body = raw if isinstance(raw, bytes) else (b"" if raw is None else str(raw).encode())
    key = record.key
    fields: dict[str, Any] = {
        "topic": record.topic,
        "partition": record.partition,
        "offset": record.offset,
        "key": key.decode("utf-8", "replace") if isinstance(key, bytes) else (None if key is None else str(key)),
        "service": service,
        "error_type": type(exc).__name__,
        "error": str(exc)[:4000] or repr(exc),
        "attempts": attempts,
        "payload_bytes": len(body),
        "payload_sha256": hashlib.sha256(body).hexdigest(),
        "headers": {k: _header_text(v) for k, v in (record.headers or ())},
    }
    parsed: Any = None
    if len(body) <= max_payload_bytes:
        try:
            parsed = json.loads(body)
        except (ValueError, UnicodeDecodeError):
            parsed = None
    trace = _trace_of(parsed)
    if parsed is not None:
        fields["payload_json"] = parsed
    else:
        cut = body[:max_payload_bytes]
        fields["payload"] = cut.decode("utf-8", "replace")
        fields["payload_truncated"] = len(cut) < len(body)
    return DeadLetter(trace_id=trace or uuid.uuid4().hex, **fields)


# ------------------------------------------------------------------------------------------ reading


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
    bootstrap: str,
    dlq_topic: str,
    *,
    refs: Sequence[tuple[int, int]] | None = None,
    limit: int = 1000,
    timeout_ms: int = 5000,
) -> list[LetterView]:
    """The letters of ``dlq_topic`` (every partition, oldest first, at most ``limit``), or only ``refs``.

    Reads from the start of each partition up to its end offset at the time of the call.
    """
    partitions = await topic_partitions(bootstrap, dlq_topic)
    if not partitions:
        return []
    # "earliest", and explicit seeks to the first offsets: with the default "latest" the consumer's own position
    # reset raced seek_to_beginning and sometimes left it at the end (an empty listing).
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None, auto_offset_reset="earliest"
    )
    await consumer.start()
    try:
        tps = [TopicPartition(dlq_topic, p) for p in partitions]
        wanted = set(refs) if refs is not None else None
        consumer.assign(tps)
        starts = await consumer.beginning_offsets(tps)
        ends = await consumer.end_offsets(tps)
        for tp in tps:
            consumer.seek(tp, starts[tp])
        out: list[LetterView] = []
        remaining = {tp for tp in tps if starts[tp] < ends[tp]}
        while remaining and len(out) < limit:
            batch = await consumer.getmany(*remaining, timeout_ms=timeout_ms)
            if not batch:
                break  # nothing more within the timeout: what was read is the answer
            for tp, records in batch.items():
                for record in records:
                    if record.offset < ends[tp] and (wanted is None or (tp.partition, record.offset) in wanted):
                        out.append(_view(record))
                if await consumer.position(tp) >= ends[tp]:
                    remaining.discard(tp)
        out.sort(key=lambda v: (v.dlq_partition, v.dlq_offset))
        return out[:limit]
    finally:
        await consumer.stop()


async def topic_partitions(bootstrap: str, topic: str) -> list[int]:
    """The partition ids of ``topic`` (empty when it does not exist), from the cluster's metadata."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, client_id="evidentia-dlq")
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


async def fetch_original(bootstrap: str, letter: DeadLetter) -> bytes | None:
    """The original record's body from its own topic, if Kafka still has it and it matches the letter."""
    if letter.partition is None or letter.offset is None:
        return None
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None)
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
    status: str  # "replayed", "skipped" (replayed before), "refused" (original not available)
    detail: str = ""


async def replay(
    bootstrap: str,
    views: Sequence[LetterView],
    *,
    pool: Any | None = None,
    force: bool = False,
    max_request_size: int = 8_388_608,
) -> list[ReplayOutcome]:
    """Send ``views`` back to their original topics (original key and headers, plus a replay header)."""
    outcomes: list[ReplayOutcome] = []
    done = await replayed_refs(pool, views) if pool is not None else set()
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, acks="all", enable_idempotence=True, max_request_size=max_request_size
    )
    await producer.start()
    try:
        for view in views:
            letter = view.letter
            if (view.dlq_topic, view.dlq_partition, view.dlq_offset) in done and not force:
                outcomes.append(ReplayOutcome(view.ref, letter.topic, "skipped", "replayed before (use force)"))
                continue
            body = letter.original()
            if body is None:
                body = await fetch_original(bootstrap, letter)
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
            headers = [
                (k, v.encode()) for k, v in letter.headers.items() if k not in (REPLAY_HEADER, UNDECODABLE_HEADER)
            ]
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
    finally:
        await producer.stop()
    return outcomes


async def replayed_refs(pool: Any, views: Sequence[LetterView]) -> set[tuple[str, int, int]]:
    """Which of ``views`` were replayed before (``dead_letter_replays``)."""
    if not views:
        return set()
    rows = await pool.fetch(
        "SELECT dlq_topic, dlq_partition, dlq_offset FROM dead_letter_replays WHERE dlq_topic = ANY($1::text[])",
        list({v.dlq_topic for v in views}),
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
