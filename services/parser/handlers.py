"""Parser handlers: decode ``documents.fetched`` -> parse and chunk -> store -> publish ``chunks.created``."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import asyncpg
from faststream.kafka import KafkaBroker
from faststream.middlewares import AckPolicy

from services.parser.chunking import Chunker, build_chunker
from services.parser.core import chunk_document, parse_content
from services.parser.imported import server_side
from services.parser.store import chunks_missing_vectors, delete_document, store_document
from shared import metrics
from shared.chunk_wire import encode_chunk
from shared.claimcheck import ClaimMissing, claim
from shared.db import create_pool, reachable
from shared.db.jobs import fail_documents_hook, set_stage
from shared.embedding.passage_tokens import PassageTokenizer, passage_tokenizer
from shared.events import ChunkCreated, DocumentDeleted, DocumentFetched
from shared.kafka.context import KafkaMessage
from shared.kafka.dead_letters import add_dead_letter_hook
from shared.kafka.decoding import decode
from shared.kafka.errors import PoisonEvent
from shared.kafka.topics import CHUNKS_CREATED, DOCUMENTS_FETCHED
from shared.models import ParsedDocument
from shared.provenance import Origin
from shared.settings import Settings

log = logging.getLogger(__name__)
GROUP_ID = "evidentia-parser"


class ParserState:
    """What the handlers need, made once per process at start-up."""

    def __init__(self, settings: Settings):
        self.settings = settings
        self._pool: asyncpg.Pool | None = None
        self._chunker: Chunker | None = None
        self.token_ids: PassageTokenizer | None = None

    async def start(self) -> None:
        self._pool = await create_pool(self.settings.database)
        add_dead_letter_hook(fail_documents_hook(self._pool))
        # Loading the tokenizer takes a moment; do it off the event loop.
        self._chunker = await asyncio.to_thread(build_chunker, self.settings)
        self.token_ids = await asyncio.to_thread(token_id_maker, self.settings)

    async def stop(self) -> None:
        if self._pool is not None:
            await self._pool.close()

    async def ready(self) -> bool:
        return self._pool is not None and self._chunker is not None and await reachable(self.pool)

    @property
    def pool(self) -> asyncpg.Pool:
        assert self._pool is not None, "parser not started"
        return self._pool

    @property
    def chunker(self) -> Chunker:
        assert self._chunker is not None, "parser not started"
        return self._chunker


def token_id_maker(settings: Settings) -> PassageTokenizer | None:
    """What makes the token ids shipped in ``chunks.created``: the embedding model's passage tokenizer.

    Only when the chunker counts with the embedding model's own tokenizer (``EVIDENTIA_CHUNK_TOKENIZER``
    unset or the same model): the parser and the embedder both read ``EVIDENTIA_EMBEDDING_MODEL``, and
    each id list is labelled with the model's canonical name, which the embedder checks against its
    own before using the ids (a mismatch, e.g. mid model switch, falls back to the text).
    """
    chunk_tok = settings.chunking.tokenizer
    if chunk_tok and chunk_tok.strip() != settings.embedding.model.strip():
        return None
    try:
        tok = passage_tokenizer(settings.embedding)
    except Exception:  # a tokenizer that cannot load only costs the embedder its own tokenisation
        log.warning("cannot load the passage tokenizer; chunks.created will carry no token ids", exc_info=True)
        return None
    log.info("shipping token ids", extra={"tokenizer": repr(tok)})
    return tok


def parse_event(event: DocumentFetched, chunker: Chunker) -> list[ParsedDocument]:
    """The pure part: one fetched document -> parsed documents with chunks (PoisonEvent if it cannot be)."""
    try:
        if event.format == "document-json":
            assert event.document is not None
            return [chunk_document(server_side(event.document), chunker)]
        assert event.content is not None
        return parse_content(event.format, event.content, chunker=chunker)
    except ValueError as exc:  # bad XML, unsafe XML, wrong format: never going to work
        raise PoisonEvent(f"cannot parse {event.document_id} ({event.format}): {exc}") from exc


def register(broker: KafkaBroker, state: ParserState) -> None:
    chunks_out = broker.publisher(CHUNKS_CREATED, title="chunks.created", schema=ChunkCreated)

    @broker.subscriber(
        DOCUMENTS_FETCHED,
        group_id=GROUP_ID,
        auto_offset_reset="earliest",
        ack_policy=AckPolicy.ACK,
        max_poll_interval_ms=state.settings.kafka.max_poll_interval_ms,
        title="documents.fetched:parser",
        description="DocumentFetched (parse, store, chunk) or DocumentDeleted (remove).",
    )
    async def on_document(msg: KafkaMessage) -> None:
        try:
            body: dict[str, Any] = json.loads(msg.body)
        except (ValueError, UnicodeDecodeError) as exc:
            raise PoisonEvent(f"not JSON: {exc}") from exc
        if not isinstance(body, dict):
            raise PoisonEvent("event is not a JSON object")
        if "format" not in body and "source_id" in body:
            await _delete(decode(DocumentDeleted, body))
            return
        event = decode(DocumentFetched, body)
        if event.content_ref is not None:  # claim check: the text was too large for the event
            try:
                event = event.model_copy(update={"content": await claim(state.pool, event)})
            except ClaimMissing as exc:
                raise PoisonEvent(str(exc)) from exc
        docs = await asyncio.to_thread(parse_event, event, state.chunker)
        origin: Origin = "inline" if event.format == "document-json" else "ncbi"
        for doc in docs:
            result = await store_document(state.pool, doc, origin, job_id=event.job_id)
            metrics.DOCUMENTS_STORED.labels(result.outcome).inc()
            if result.outcome == "refused":  # an inline document for an NCBI record: the record stays
                await set_stage(state.pool, [doc.document_id], "failed", result.reason, force=True)
                log.warning("inline document refused", extra={"document_id": doc.document_id, "reason": result.reason})
                continue
            chunks = result.chunks
            if result.outcome == "unchanged":
                chunks = await chunks_missing_vectors(state.pool, doc.document_id)
                if not chunks:
                    await set_stage(state.pool, [doc.document_id], "embedded", force=True)
                    continue
            await set_stage(state.pool, [doc.document_id], "parsed", force=True)
            key = doc.document_id.encode()
            tok = state.token_ids
            ids: list[list[int] | None] = (
                list(await asyncio.to_thread(tok, [c.embedding_text for c in chunks]))
                if tok is not None
                else [None] * len(chunks)
            )
            await asyncio.gather(
                *(
                    chunks_out.publish(
                        encode_chunk(  # version 2: the binary frame (shared.chunk_wire)
                            ChunkCreated(
                                trace_id=event.trace_id,
                                chunk_id=chunk.chunk_id,
                                document_id=doc.document_id,
                                ordinal=chunk.ordinal,
                                text=chunk.embedding_text,
                                token_count=chunk.token_count,
                                job_id=event.job_id,
                                token_model=tok.model if tok is not None and chunk_ids is not None else None,
                            ),
                            chunk_ids,
                        ),
                        key=key,
                    )
                    for chunk, chunk_ids in zip(chunks, ids, strict=True)
                )
            )
            metrics.CHUNKS_STORED.labels("parser").inc(len(chunks))
            log.info(
                "document stored",
                extra={"document_id": doc.document_id, "outcome": result.outcome, "chunks": len(chunks)},
            )

    async def _delete(event: DocumentDeleted) -> None:
        existed = await delete_document(state.pool, event.document_id)
        await set_stage(state.pool, [event.document_id], "deleted", force=True)
        log.info("document deleted", extra={"document_id": event.document_id, "existed": existed})
