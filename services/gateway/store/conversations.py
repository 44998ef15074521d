"""Conversations in PostgreSQL: messages, and citations numbered [1], [2]... conversation-wide.

A conversation belongs to the API key that started it (``owner``); another key gets 404 for it. With
authentication off every conversation is ownerless and open to everyone who can reach the gateway.

Turns of one conversation are serialised: the gateway holds a per-conversation lock for a turn (one
process), and the store refuses a turn whose number or citation numbers were taken meanwhile (several
gateway processes): :class:`ConversationConflict`, HTTP 409.

Deletion (``DELETE /v1/conversations/{id}``, and the retention job of :mod:`services.gateway.retention`)
removes the conversation row; its messages and citations go with it (``ON DELETE CASCADE``). A turn that
was being answered meanwhile is not stored: it locks the conversation row before it writes, so it either
commits first (and is deleted with the rest) or finds the row gone (:class:`ConversationGone`, HTTP 404);
only a conversation's first turn creates the row, so a deleted conversation never comes back.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Protocol

import asyncpg

from services.gateway.schemas.conversations import ConversationView, MessageView
from services.gateway.store.idle import delete_idle
from shared.citations import gate_summary, scrub
from shared.events import ChatTurn, Citation, CitationCheck, EvidenceSummary
from shared.models import CitationMetrics


class ConversationConflict(Exception):
    """Another turn of the same conversation was stored meanwhile."""


class ConversationGone(Exception):
    """The conversation was deleted while a turn of it was being answered; the turn is not stored."""


@dataclass
class ConversationContext:
    """What a new turn needs from the earlier ones."""

    conversation_id: str
    turns: int = 0
    history: list[ChatTurn] = field(default_factory=list)
    numbering: dict[str, int] = field(default_factory=dict)
    cited_chunk_ids: list[str] = field(default_factory=list)  # most recent turn first
    last_question: str | None = None  # the standalone question of the latest turn
    references: list[Citation] = field(default_factory=list)  # every citation so far, by number


@dataclass
class TurnRecord:
    owner: str | None  # a new conversation's owner (ignored for an existing one)
    turn: int
    question: str
    standalone_question: str
    answer: str
    display: str
    mode: str
    citations: list[Citation]
    cited_chunk_ids: list[str]
    citation_check: CitationCheck
    summary: EvidenceSummary | None
    timings_ms: dict[str, float]


class ConversationStore(Protocol):
    async def context(
        self, conversation_id: str, owner: str | None, max_turns: int, max_chunks: int
    ) -> ConversationContext | None: ...

    async def save_turn(self, conversation_id: str, record: TurnRecord) -> None: ...

    async def view(self, conversation_id: str, owner: str | None) -> ConversationView | None: ...

    async def delete(self, conversation_id: str, owner: str | None, *, any_owner: bool = False) -> bool: ...


def new_conversation_id() -> str:
    return uuid.uuid4().hex


def _visible(row_owner: str | None, owner: str | None) -> bool:
    return row_owner is None or row_owner == owner


class PgConversationStore:
    def __init__(self, pool: asyncpg.Pool):
        self.pool = pool

    async def context(
        self, conversation_id: str, owner: str | None, max_turns: int, max_chunks: int
    ) -> ConversationContext | None:
        async with self.pool.acquire() as conn:
            row = await conn.fetchrow("SELECT owner FROM conversations WHERE conversation_id = $1", conversation_id)
            if row is None or not _visible(row["owner"], owner):
                return None
            turns = await conn.fetchval(
                "SELECT coalesce(max(turn), 0) FROM conversation_messages WHERE conversation_id = $1",
                conversation_id,
            )
            msgs = await conn.fetch(
                """SELECT turn, role, content, standalone_question, cited_chunk_ids FROM conversation_messages
                   WHERE conversation_id = $1 AND turn > $2 ORDER BY turn, role DESC""",
                conversation_id,
                max(0, turns - max(max_turns, 1)),
            )
            refs = [
                _citation(r)
                for r in await conn.fetch(
                    "SELECT * FROM conversation_citations WHERE conversation_id = $1 ORDER BY number",
                    conversation_id,
                )
            ]
            chunk_rows = await conn.fetch(
                """SELECT cited_chunk_ids FROM conversation_messages
                   WHERE conversation_id = $1 AND role = 'assistant' ORDER BY turn DESC""",
                conversation_id,
            )
        ctx = ConversationContext(
            conversation_id, int(turns), numbering={c.citation_id: c.number for c in refs}, references=refs
        )
        for m in msgs:  # ordered by turn, 'user' before 'assistant'
            if max_turns > 0:
                ctx.history.append(ChatTurn(role=m["role"], content=m["content"]))
            if m["role"] == "user":
                ctx.last_question = m["standalone_question"] or m["content"]
        for r in chunk_rows:
            for chunk in r["cited_chunk_ids"]:
                if chunk not in ctx.cited_chunk_ids and len(ctx.cited_chunk_ids) < max_chunks:
                    ctx.cited_chunk_ids.append(chunk)
        return ctx

    async def save_turn(self, conversation_id: str, record: TurnRecord) -> None:
        details = {
            "citation_check": record.citation_check.model_dump(mode="json"),
            "summary": record.summary.model_dump(mode="json") if record.summary else None,
            "timings_ms": record.timings_ms,
            # This turn's own ties of claim to source sentence (the reference list keeps the sources only).
            "citation_spans": {c.citation_id: _turn_citation(c) for c in record.citations if c.spans},
        }
        try:
            async with self.pool.acquire() as conn, conn.transaction():
                if record.turn == 1:  # a new conversation is stored with its first turn, not before
                    await conn.execute(
                        """INSERT INTO conversations (conversation_id, owner, title) VALUES ($1, $2, $3)
                           ON CONFLICT (conversation_id) DO NOTHING""",
                        conversation_id,
                        record.owner,
                        record.question[:200],
                    )
                # The row lock orders this turn against a deletion: deleted first, the turn is not stored.
                locked = await conn.fetchval(
                    "SELECT 1 FROM conversations WHERE conversation_id = $1 FOR UPDATE", conversation_id
                )
                if locked is None:
                    raise ConversationGone(f"conversation {conversation_id} was deleted")
                await conn.execute(
                    """INSERT INTO conversation_messages
                           (conversation_id, turn, role, content, standalone_question)
                       VALUES ($1, $2, 'user', $3, $4)""",
                    conversation_id,
                    record.turn,
                    record.question,
                    record.standalone_question,
                )
                await conn.execute(
                    """INSERT INTO conversation_messages (conversation_id, turn, role, content, display, mode,
                                                          cited_ids, cited_chunk_ids, details)
                       VALUES ($1, $2, 'assistant', $3, $4, $5, $6, $7, $8::jsonb)""",
                    conversation_id,
                    record.turn,
                    record.answer,
                    record.display,
                    record.mode,
                    [c.citation_id for c in record.citations],
                    record.cited_chunk_ids,
                    json.dumps(details),
                )
                for c in record.citations:
                    existing = await conn.fetchval(
                        """SELECT number FROM conversation_citations
                           WHERE conversation_id = $1 AND citation_id = $2""",
                        conversation_id,
                        c.citation_id,
                    )
                    if existing is not None:
                        if existing != c.number:
                            raise ConversationConflict(f"{c.citation_id} is already [{existing}]")
                        continue
                    await conn.execute(
                        """INSERT INTO conversation_citations
                               (conversation_id, citation_id, number, document_id, title, journal, year, url,
                                first_turn, citation_metrics)
                           VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10::jsonb)""",
                        conversation_id,
                        c.citation_id,
                        c.number,
                        c.document_id,
                        c.title,
                        c.journal,
                        c.year,
                        c.url,
                        record.turn,
                        c.citation_metrics.model_dump_json() if c.citation_metrics is not None else None,
                    )
                await conn.execute(
                    "UPDATE conversations SET updated_at = now() WHERE conversation_id = $1", conversation_id
                )
        except asyncpg.UniqueViolationError as exc:
            raise ConversationConflict(str(exc)) from exc

    async def view(self, conversation_id: str, owner: str | None) -> ConversationView | None:
        async with self.pool.acquire() as conn:
            conv = await conn.fetchrow("SELECT * FROM conversations WHERE conversation_id = $1", conversation_id)
            if conv is None or not _visible(conv["owner"], owner):
                return None
            rows = await conn.fetch(
                "SELECT * FROM conversation_messages WHERE conversation_id = $1 ORDER BY turn, role DESC",
                conversation_id,
            )
            refs = await conn.fetch(
                "SELECT * FROM conversation_citations WHERE conversation_id = $1 ORDER BY number",
                conversation_id,
            )
        references = [_citation(r) for r in refs]
        by_id = {c.citation_id: c for c in references}
        return ConversationView(
            conversation_id=conversation_id,
            title=conv["title"],
            created_at=conv["created_at"],
            updated_at=conv["updated_at"],
            references=references,
            messages=[_message(r, by_id) for r in rows],
        )

    async def delete(self, conversation_id: str, owner: str | None, *, any_owner: bool = False) -> bool:
        """Delete a conversation with its messages and citations; False when there is none the caller may
        delete: its own (an ownerless one with authentication off), or any with ``any_owner`` (admin)."""
        deleted = await self.pool.fetchval(
            """DELETE FROM conversations WHERE conversation_id = $1 AND (owner IS NOT DISTINCT FROM $2 OR $3)
               RETURNING 1""",
            conversation_id,
            owner,
            any_owner,
        )
        return deleted is not None


async def delete_idle_conversations(pool: asyncpg.Pool, idle_for: timedelta, batch: int) -> int:
    """Delete at most ``batch`` conversations with no turn for ``idle_for`` (oldest first) with their messages
    and citations (:func:`.idle.delete_idle`); the number deleted."""
    return await delete_idle(pool, "conversations", idle_for, batch)


def _citation(r: asyncpg.Record) -> Citation:
    return Citation(
        number=r["number"],
        citation_id=r["citation_id"],
        document_id=r["document_id"],
        title=r["title"],
        journal=r["journal"],
        year=r["year"],
        url=r["url"],
        citation_metrics=_metrics(r["citation_metrics"]),
    )


def _turn_citation(c: Citation) -> dict[str, Any]:
    """What a turn stores of a citation beyond the reference: its citing sentence, spans and the answer's time."""
    return c.model_dump(mode="json", include={"text", "start", "end", "created_at", "spans"})


def _with_spans(ref: Citation, stored: dict[str, Any] | None) -> Citation:
    """The reference as a turn cited it: with that turn's stored spans (a turn stored without them: as it is)."""
    if not stored:
        return ref
    return Citation.model_validate({**ref.model_dump(), **stored})


def _metrics(value: str | dict[str, Any] | None) -> CitationMetrics | None:
    """The iCite metrics a citation was shown with when its turn was answered (stored as JSON), or None."""
    if value is None:
        return None
    return CitationMetrics.model_validate_json(value) if isinstance(value, str) else CitationMetrics(**value)


def _message(r: asyncpg.Record, refs: dict[str, Citation]) -> MessageView:
    details: dict[str, Any] = json.loads(r["details"]) if isinstance(r["details"], str) else dict(r["details"])
    if r["role"] == "user":
        return MessageView(
            turn=r["turn"],
            role="user",
            content=r["content"],
            standalone_question=r["standalone_question"],
            created_at=r["created_at"],
        )
    cited: Sequence[str] = r["cited_ids"]
    # History passes the citation gate again on the way out: only the ids this turn was verified to cite
    # (an answer stored before the gate knew every citation form is cleaned here too).
    allowed = set(cited)
    summary = EvidenceSummary.model_validate(details["summary"]) if details.get("summary") else None
    if summary is not None:
        summary = gate_summary(summary, allowed)[0]
    return MessageView(
        turn=r["turn"],
        role="assistant",
        content=scrub(r["display"] or r["content"], allowed)[0],
        answer_with_ids=scrub(r["content"], allowed)[0],
        mode=r["mode"],
        citations=[_with_spans(refs[c], details.get("citation_spans", {}).get(c)) for c in cited if c in refs],
        citation_check=CitationCheck.model_validate(details["citation_check"])
        if details.get("citation_check")
        else None,
        summary=summary,
        created_at=r["created_at"],
    )
