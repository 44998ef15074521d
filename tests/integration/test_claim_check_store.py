"""The claim check's stored texts on a real PostgreSQL (``shared/claimcheck.py``, issue 40 point 12): a text is
kept as long as a dead letter can refer to it, so replaying a letter after the pipeline topics' week still finds
the text; only texts no event or letter can refer to are removed."""

from __future__ import annotations

import asyncpg
import pytest

from shared import claimcheck
from shared.claimcheck import check_in, claim, expire
from shared.events import DocumentFetched
from shared.kafka.topics import (
    DEAD_LETTER_RETENTION_MS,
    PIPELINE_RETENTION_MS,
    REFERRED_CONTENT_KEPT_MS,
    dlq,
    standard_topics,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]

DAY_S = 24 * 3600


def _event(n: int) -> DocumentFetched:
    return DocumentFetched(
        document_id=f"bookshelf:NBK40{n}",
        source="bookshelf",
        source_id=f"NBK40{n}",
        format="bookshelf-nxml",
        content=f"<book-part>{n} " + "guideline text " * 2_000 + "</book-part>",
    )


async def _age(pool: asyncpg.Pool, ref: str, days: float) -> None:
    await pool.execute(
        "UPDATE raw_documents SET created_at = now() - make_interval(secs => $2) WHERE ref = $1", ref, days * DAY_S
    )


async def _expire(pool: asyncpg.Pool, monkeypatch: pytest.MonkeyPatch) -> int:
    monkeypatch.setattr(claimcheck, "_last_expiry", None)  # at most once an hour per process: not in a test
    return await expire(pool)


def test_texts_are_kept_as_long_as_a_letter_of_an_unread_event_is_kept() -> None:
    month = {s.config["retention.ms"] for s in standard_topics(1) if s.name.endswith(".dlq")}
    assert month == {str(DEAD_LETTER_RETENTION_MS)}
    assert dlq("documents.fetched") in {s.name for s in standard_topics(1)}
    assert REFERRED_CONTENT_KEPT_MS >= PIPELINE_RETENTION_MS + DEAD_LETTER_RETENTION_MS


async def test_a_letter_replayed_after_a_week_still_finds_its_text(
    private_pool: asyncpg.Pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    await private_pool.execute("TRUNCATE raw_documents")
    events = [await check_in(private_pool, _event(n), 1024) for n in range(3)]
    refs = [e.content_ref for e in events]
    assert all(refs) and await private_pool.fetchval("SELECT count(*) FROM raw_documents") == 3
    # 0: dead-lettered (after its claim) ten days ago, replayed now: a week past the pipeline topics' retention.
    # 1: last used longer ago than any letter or event is kept. 2: claimed (parsed) just before that limit.
    await _age(private_pool, str(refs[0]), 10)
    await _age(private_pool, str(refs[1]), REFERRED_CONTENT_KEPT_MS / 1000 / DAY_S + 1)
    await _age(private_pool, str(refs[2]), REFERRED_CONTENT_KEPT_MS / 1000 / DAY_S - 1)
    assert await claim(private_pool, events[2]) == _event(2).content  # the claim restarts its keeping
    assert await _expire(private_pool, monkeypatch) == 1
    assert await claim(private_pool, events[0]) == _event(0).content
    assert await claim(private_pool, events[2]) == _event(2).content
    with pytest.raises(claimcheck.ClaimMissing):
        await claim(private_pool, events[1])
    # the text claimed a moment ago outlives the limit counted from its check-in
    assert await private_pool.fetchval(
        "SELECT created_at > now() - interval '1 minute' FROM raw_documents WHERE ref = $1", refs[2]
    )
