"""The conversation store on a real PostgreSQL: stored citations keep their iCite metrics; deletion: the
turns and citations go with a conversation, owners, a turn racing a deletion (either order; never resurrected),
and the retention job's batches.

Only PostgreSQL is started (a private cluster), not the service stack.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta

import asyncpg
import pytest

from services.gateway.retention import ConversationRetention
from services.gateway.store.conversations import (
    ConversationGone,
    PgConversationStore,
    TurnRecord,
    delete_idle_conversations,
)
from shared.events import Citation, CitationCheck
from shared.models import CitationMetrics
from shared.settings import GatewaySettings

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TABLES = ("conversations", "conversation_messages", "conversation_citations")


def turn(n: int, owner: str | None = None, pmid: str = "101") -> TurnRecord:
    citation = Citation(number=n, citation_id=f"PMID:{pmid}", document_id=f"pubmed:{pmid}", title="A study", year=2001)
    return TurnRecord(
        owner=owner,
        turn=n,
        question=f"Question {n}?",
        standalone_question=f"Question {n}?",
        answer=f"Answer [PMID:{pmid}].",
        display=f"Answer [{n}].",
        mode="extractive",
        citations=[citation],
        cited_chunk_ids=[f"pubmed:{pmid}#a#0"],
        citation_check=CitationCheck(cited=[f"PMID:{pmid}"], verified=[f"PMID:{pmid}"]),
        summary=None,
        timings_ms={},
    )


@pytest.fixture
async def pool(migrated_postgres_url: str) -> AsyncIterator[asyncpg.Pool]:
    pool = await asyncpg.create_pool(migrated_postgres_url, min_size=2, max_size=6)
    assert pool is not None
    await pool.execute("TRUNCATE conversations CASCADE")
    try:
        yield pool
    finally:
        await pool.close()


async def rows(pool: asyncpg.Pool, cid: str) -> dict[str, int]:
    return {t: await pool.fetchval(f"SELECT count(*) FROM {t} WHERE conversation_id = $1", cid) for t in TABLES}


async def test_delete_takes_the_turns_and_citations_with_it(pool: asyncpg.Pool) -> None:
    store = PgConversationStore(pool)
    await store.save_turn("c1", turn(1))
    await store.save_turn("c1", turn(2, pmid="202"))
    await store.save_turn("c2", turn(1))
    assert await rows(pool, "c1") == {"conversations": 1, "conversation_messages": 4, "conversation_citations": 2}
    assert await store.delete("c1", None)
    assert await rows(pool, "c1") == dict.fromkeys(TABLES, 0)
    assert await store.view("c1", None) is None
    assert (await store.view("c2", None)) is not None  # only that one
    assert not await store.delete("c1", None)  # already gone
    assert not await store.delete("nope", None)


async def test_stored_citations_keep_the_citation_metrics_they_were_shown_with(pool: asyncpg.Pool) -> None:
    store = PgConversationStore(pool)
    metrics = CitationMetrics(citation_count=250, relative_citation_ratio=4.12, nih_percentile=95.3, year=2019)
    first = turn(1)
    first.citations[0] = first.citations[0].model_copy(update={"citation_metrics": metrics})
    await store.save_turn("c1", first)
    await store.save_turn("c1", turn(2, pmid="202"))  # no metrics imported for this one
    view = await store.view("c1", None)
    assert view is not None
    shown = {c.citation_id: c.citation_metrics for c in view.references}
    assert shown == {"PMID:101": metrics, "PMID:202": None}
    assistant = [m for m in view.messages if m.role == "assistant"]
    assert assistant[0].citations[0].citation_metrics == metrics  # the turn's own citations too
    context = await store.context("c1", None, 4, 10)
    assert context is not None and context.references[0].citation_metrics == metrics


async def test_only_the_owner_or_any_owner_deletes(pool: asyncpg.Pool) -> None:
    store = PgConversationStore(pool)
    await store.save_turn("alice", turn(1, owner="key:alice"))
    await store.save_turn("open", turn(1, owner=None))
    assert not await store.delete("alice", "key:bob")
    assert not await store.delete("alice", None)  # authentication off does not reach a key's conversation
    assert not await store.delete("open", "key:bob")  # an ownerless one, with keys on: admin only
    assert await store.delete("alice", "key:alice")
    assert await store.delete("open", "key:admin", any_owner=True)
    assert await pool.fetchval("SELECT count(*) FROM conversations") == 0


async def test_a_turn_stored_after_the_deletion_is_refused_not_resurrected(pool: asyncpg.Pool) -> None:
    store = PgConversationStore(pool)
    await store.save_turn("c", turn(1))
    async with pool.acquire() as conn:
        tx = conn.transaction()
        await tx.start()
        await conn.execute("DELETE FROM conversations WHERE conversation_id = 'c'")  # not committed yet
        saving = asyncio.create_task(store.save_turn("c", turn(2, pmid="202")))
        await asyncio.sleep(0.3)
        assert not saving.done()  # the turn waits on the conversation's row lock
        await tx.commit()
    with pytest.raises(ConversationGone):
        await saving
    assert await rows(pool, "c") == dict.fromkeys(TABLES, 0)


async def test_a_deletion_waits_for_a_turn_being_stored_and_takes_it_too(pool: asyncpg.Pool) -> None:
    store = PgConversationStore(pool)
    await store.save_turn("c", turn(1))
    async with pool.acquire() as conn:
        tx = conn.transaction()
        await tx.start()
        await conn.execute("SELECT 1 FROM conversations WHERE conversation_id = 'c' FOR UPDATE")  # a turn storing
        await conn.execute(
            "INSERT INTO conversation_messages (conversation_id, turn, role, content) VALUES ('c', 2, 'user', 'q')"
        )
        deleting = asyncio.create_task(store.delete("c", None))
        await asyncio.sleep(0.3)
        assert not deleting.done()
        await tx.commit()
    assert await deleting
    assert await rows(pool, "c") == dict.fromkeys(TABLES, 0)


async def _age(pool: asyncpg.Pool, cids: list[str], days: float) -> None:
    await pool.execute(
        "UPDATE conversations SET updated_at = now() - $2::interval WHERE conversation_id = ANY($1::text[])",
        cids,
        timedelta(days=days),
    )


async def test_idle_conversations_are_deleted_in_batches_oldest_first(pool: asyncpg.Pool) -> None:
    store = PgConversationStore(pool)
    for i in range(7):
        await store.save_turn(f"old{i}", turn(1))
    await store.save_turn("fresh", turn(1))
    await store.save_turn("recent", turn(1))
    for i in range(7):
        await _age(pool, [f"old{i}"], 40 + i)
    await _age(pool, ["recent"], 29)
    assert await delete_idle_conversations(pool, timedelta(days=30), 3) == 3
    left = {r["conversation_id"] for r in await pool.fetch("SELECT conversation_id FROM conversations")}
    assert left == {"old0", "old1", "old2", "old3", "fresh", "recent"}  # the three oldest went first
    job = ConversationRetention.over(
        GatewaySettings(conversation_retention_days=30, conversation_retention_batch=3),  # type: ignore[call-arg]
        lambda: pool,
    )
    assert await job.purge() == 4
    left = {r["conversation_id"] for r in await pool.fetch("SELECT conversation_id FROM conversations")}
    assert left == {"fresh", "recent"}
    assert await pool.fetchval("SELECT count(*) FROM conversation_messages") == 4  # 2 conversations x 1 turn x 2


async def test_a_conversation_being_written_is_skipped_not_waited_for(pool: asyncpg.Pool) -> None:
    store = PgConversationStore(pool)
    await store.save_turn("busy", turn(1))
    await store.save_turn("idle", turn(1))
    await _age(pool, ["busy", "idle"], 100)
    async with pool.acquire() as conn:
        tx = conn.transaction()
        await tx.start()
        await conn.execute("SELECT 1 FROM conversations WHERE conversation_id = 'busy' FOR UPDATE")
        deleted = await asyncio.wait_for(delete_idle_conversations(pool, timedelta(days=1), 10), 5)
        await tx.rollback()
    assert deleted == 1
    assert await pool.fetchval("SELECT array_agg(conversation_id) FROM conversations") == ["busy"]
