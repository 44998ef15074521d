"""Claim check for large documents: the text stored once in PostgreSQL, the event carrying a reference.

A big JATS article or a Bookshelf NXML part (up to 64 MiB) does not fit a Kafka message
(``max_request_size``, 8 MiB by default, and the broker's own limit). The fetcher calls
:func:`check_in` before publishing a ``DocumentFetched``: content over ``claim_check_bytes`` is written
to ``raw_documents`` (key: ``sha256:<hex>`` of the text, so a re-fetch of the same text writes nothing
new) and the event becomes version 2 with ``content_ref`` instead of ``content``. The parser calls
:func:`claim` to get the text back; a reference that is not (or no longer) stored is a poison event,
dead-lettered with that reason. Stored texts are kept as long as an event or a dead letter may refer to them
(:data:`shared.kafka.topics.REFERRED_CONTENT_KEPT_MS`: a pipeline retention, then a dead-letter retention, counted
from the text's last check-in or claim), so a redelivered event, or one replayed from its dead letter up to
the letter's last day, still finds its text; older rows are removed by the fetcher (:func:`expire`, at most once
an hour per process).

:func:`oversized_reason` says why an event can still not be published (its serialized size over the
producer's limit even after the claim check, e.g. a ``document-json`` event): the fetcher marks that
document failed with the reason instead of failing the whole batch or job.
"""

from __future__ import annotations

import hashlib
import time
from typing import Any

from shared.events import DocumentFetched
from shared.kafka.topics import REFERRED_CONTENT_KEPT_MS

REF_PREFIX = "sha256:"
ENVELOPE_ALLOWANCE = 64 * 1024
"""Bytes kept free under ``max_request_size`` for the record's key, headers and batch framing."""


class ClaimMissing(LookupError):
    """The event refers to stored content that is not there (removed, or another database)."""


def content_ref(content: str) -> str:
    return REF_PREFIX + hashlib.sha256(content.encode("utf-8")).hexdigest()


async def check_in(pool: Any, event: DocumentFetched, threshold: int) -> DocumentFetched:
    """``event`` as it should travel: unchanged when small, else with its content stored and referenced."""
    content = event.content
    if content is None or len(content) * 4 <= threshold:  # UTF-8 needs at most 4 bytes a character
        return event
    size = len(content.encode("utf-8"))
    if size <= threshold:
        return event
    ref = content_ref(content)
    await expire(pool)
    await pool.execute(
        """INSERT INTO raw_documents (ref, document_id, bytes, content) VALUES ($1, $2, $3, $4)
           ON CONFLICT (ref) DO UPDATE SET created_at = now()""",
        ref,
        event.document_id,
        size,
        content,
    )
    return event.model_copy(update={"schema_version": 2, "content": None, "content_ref": ref, "content_bytes": size})


async def claim(pool: Any, event: DocumentFetched) -> str:
    """The event's content: inline, or fetched by its reference (:class:`ClaimMissing` if absent)."""
    if event.content is not None:
        return event.content
    ref = event.content_ref or ""
    # A claim restarts the text's keeping: a letter the event becomes now is kept a dead-letter retention from now.
    content = await pool.fetchval(
        "UPDATE raw_documents SET created_at = greatest(created_at, now()) WHERE ref = $1 RETURNING content", ref
    )
    if content is None:
        raise ClaimMissing(f"{event.document_id}: stored content {ref} not found")
    if content_ref(content) != ref:  # cannot happen unless the row was edited: never parse the wrong text
        raise ClaimMissing(f"{event.document_id}: stored content does not match {ref}")
    return str(content)


async def expire(pool: Any, *, now: float | None = None) -> int:
    """Remove stored texts no event or dead letter can refer to any more (once an hour per process)."""
    global _last_expiry
    current = time.monotonic() if now is None else now
    if _last_expiry is not None and current - _last_expiry < 3600:
        return 0
    _last_expiry = current
    status = await pool.execute(
        "DELETE FROM raw_documents WHERE created_at < now() - make_interval(secs => $1)",
        REFERRED_CONTENT_KEPT_MS / 1000,
    )
    return int(str(status).rsplit(" ", 1)[-1] or 0)


_last_expiry: float | None = None


def oversized_reason(body_bytes: int, max_request_size: int) -> str | None:
    """Why a serialized event of ``body_bytes`` cannot be published, or None when it fits."""
    limit = max_request_size - ENVELOPE_ALLOWANCE
    if body_bytes <= limit:
        return None
    return (
        f"event of {body_bytes} bytes is over the Kafka message limit ({limit} bytes usable of "
        f"max_request_size {max_request_size}) even after the claim check"
    )
