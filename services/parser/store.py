"""Documents and chunks in PostgreSQL: upsert keyed by (source, source id), replace on change.

A document whose content hash is unchanged is left alone (no new chunks, no new events); a changed
one replaces its chunks in one transaction, so readers never see half of each version. Vectors of
replaced chunks go with them (``ON DELETE CASCADE``); the new chunks' ids carry the new hash, so a
late vector for an old chunk can never attach to a new one.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Literal

import asyncpg

from services.parser.chunking import embedding_text
from shared.models import Chunk, ParsedDocument
from shared.provenance import CONFLICT_REASON, Origin, claim_column, claimed_ids

log = logging.getLogger(__name__)

Outcome = Literal["inserted", "updated", "unchanged", "refused"]


@dataclass(frozen=True)
class StoredChunk:
    chunk_id: str
    ordinal: int
    embedding_text: str
    token_count: int


@dataclass(frozen=True)
class StoreResult:
    document_id: str
    outcome: Outcome
    chunks: list[StoredChunk]
    reason: str | None = None
    claims_withdrawn: list[str] = field(default_factory=list)
    """Inline documents that claimed this NCBI record's id by their pmid or pmcid and no longer do."""


def chunk_id(document_id: str, content_hash: str, ordinal: int) -> str:
    """The id of a chunk: the document id, the first 12 characters of the content hash and the chunk's ordinal."""
    return f"{document_id}#{content_hash[:12]}#{ordinal}"


def _metadata(doc: ParsedDocument) -> str:
    return json.dumps(doc.model_dump(mode="json", exclude={"chunks", "full_text", "abstract", "priority"}))


async def store_document(
    pool: asyncpg.Pool, doc: ParsedDocument, origin: Origin = "ncbi", *, job_id: str | None = None
) -> StoreResult:
    """Insert or replace ``doc`` and its chunks; tell what happened and which chunks are new.

    ``origin`` is where the document came from (:mod:`shared.provenance`): an ``inline`` document that
    claims an id stored as an NCBI record is ``refused`` (nothing written); an NCBI record replaces an
    inline document of the same id even when their content is the same, and takes its id from inline documents
    stored before it that claim it by their pmid or pmcid (``claims_withdrawn``). Either side first locks the ids
    in question, so an inline document and the record stored at the same moment end as in either order.

    Priority: the document's own ``priority``, else the priority of ingestion job ``job_id`` (for a stored
    document only when the job may change stored documents' priority), else the stored document's (a replaced
    document keeps the priority it was given), else 50; the database holds the rule
    (``211_document_priority.sql``, ``230_ingest_priority_scope.sql``). A new priority alone changes no
    content: an unchanged document only has its priority updated.
    """
    digest = doc.content_hash()
    doc_id = doc.document_id
    async with pool.acquire() as conn, conn.transaction():
        # Before any row lock (the refusal below takes the record's row): one order for every storing transaction.
        locked = sorted(claimed_ids(doc)) if origin == "inline" else [doc_id]
        await conn.execute(
            "SELECT pg_advisory_xact_lock(hashtext('evidentia.claim:' || id)) FROM unnest($1::text[]) AS id", locked
        )
        row = await conn.fetchrow(
            "SELECT content_hash, origin FROM documents WHERE document_id = $1 FOR UPDATE", doc_id
        )
        priority = doc.priority
        if priority is None and job_id is not None:
            priority = await conn.fetchval("SELECT ingest_job_priority($1, $2)", job_id, doc_id)
        if origin == "inline":
            taken = await conn.fetch(
                "SELECT document_id FROM documents WHERE document_id = ANY($1::text[]) AND origin = 'ncbi' FOR SHARE",
                claimed_ids(doc),
            )
            if taken:
                ids = ", ".join(sorted(str(r["document_id"]) for r in taken))
                return StoreResult(doc_id, "refused", [], f"{ids} {CONFLICT_REASON}")
        withdrawn = await _withdraw_inline_claims(conn, doc_id) if origin == "ncbi" else []
        current = None if row is None else row["content_hash"]
        if current == digest:
            if row is not None and row["origin"] != origin:
                await conn.execute("UPDATE documents SET origin = $2 WHERE document_id = $1", doc_id, origin)
            if priority is not None:
                await conn.execute(
                    "UPDATE documents SET priority = $2 WHERE document_id = $1 AND priority <> $2", doc_id, priority
                )
            return StoreResult(doc_id, "unchanged", [], claims_withdrawn=withdrawn)
        outcome: Outcome = "inserted" if current is None else "updated"
        await conn.execute(
            """
            INSERT INTO documents (document_id, source, source_id, pmid, pmcid, doi, title, abstract,
                full_text, journal, journal_iso, year, pub_date, language, publication_types, study_type,
                evidence_level, mesh_terms, retracted, metadata, content_hash, origin, updated_at, priority,
                trial_phases, trial_status, has_results)
            VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14,$15,$16,$17,$18,$19,$20::jsonb,$21,$22, now(),
                    coalesce($23::smallint, 50), $24::text[], $25, $26)
            ON CONFLICT (document_id) DO UPDATE SET origin = EXCLUDED.origin,
                priority = coalesce($23::smallint, documents.priority),
                pmid = EXCLUDED.pmid, pmcid = EXCLUDED.pmcid, doi = EXCLUDED.doi, title = EXCLUDED.title,
                abstract = EXCLUDED.abstract, full_text = EXCLUDED.full_text, journal = EXCLUDED.journal,
                journal_iso = EXCLUDED.journal_iso, year = EXCLUDED.year, pub_date = EXCLUDED.pub_date,
                language = EXCLUDED.language, publication_types = EXCLUDED.publication_types,
                study_type = EXCLUDED.study_type, evidence_level = EXCLUDED.evidence_level,
                mesh_terms = EXCLUDED.mesh_terms, retracted = EXCLUDED.retracted,
                metadata = EXCLUDED.metadata, content_hash = EXCLUDED.content_hash, updated_at = now(),
                trial_phases = EXCLUDED.trial_phases, trial_status = EXCLUDED.trial_status,
                has_results = EXCLUDED.has_results
            """,
            doc_id,
            doc.source,
            doc.source_id,
            doc.pmid,
            doc.pmcid,
            doc.doi,
            doc.title,
            doc.abstract,
            doc.full_text,
            doc.journal.title,
            doc.journal.iso_abbrev,
            doc.year,
            doc.pub_date,
            doc.language,
            doc.publication_types,
            doc.study_type,
            doc.evidence_level,
            [m.descriptor for m in doc.mesh],
            doc.retracted,
            _metadata(doc),
            digest,
            origin,
            priority,
            list(doc.trial.phases) if doc.trial is not None else None,
            doc.trial.status if doc.trial is not None else None,
            doc.trial.has_results if doc.trial is not None else None,
        )
        await conn.execute("DELETE FROM chunks WHERE document_id = $1", doc_id)
        stored = [_stored(doc_id, digest, doc.title, c) for c in doc.chunks]
        # One statement for all the chunks: the lexical index's triggers then index them in one pass.
        await conn.execute(
            """
            INSERT INTO chunks (chunk_id, document_id, ordinal, section, doc_title, content, token_count,
                                char_start, char_end)
            SELECT u.chunk_id, $2, u.ordinal, u.section, $3, u.content, u.token_count, u.char_start, u.char_end
            FROM unnest($1::text[], $4::integer[], $5::text[], $6::text[], $7::integer[], $8::integer[],
                        $9::integer[]) AS u(chunk_id, ordinal, section, content, token_count, char_start, char_end)
            """,
            [s.chunk_id for s in stored],
            doc_id,
            doc.title,
            [c.ordinal for c in doc.chunks],
            [c.section for c in doc.chunks],
            [c.text for c in doc.chunks],
            [c.token_count for c in doc.chunks],
            [c.char_start for c in doc.chunks],
            [c.char_end for c in doc.chunks],
        )
        return StoreResult(doc_id, outcome, stored, claims_withdrawn=withdrawn)


async def _withdraw_inline_claims(conn: asyncpg.Connection, record_id: str) -> list[str]:
    """Clear the pmid (or pmcid) by which inline documents of other ids claim NCBI record ``record_id``, noting it
    in their metadata (``withdrawn_claims``); the ids of those documents."""
    claim = claim_column(record_id)
    if claim is None:
        return []
    column, value = claim
    rows = await conn.fetch(
        f"""UPDATE documents SET {column} = NULL,
                metadata = metadata || jsonb_build_object(
                    '{column}', NULL,
                    'withdrawn_claims', coalesce(metadata -> 'withdrawn_claims', '[]'::jsonb) || jsonb_build_array(
                        jsonb_build_object('{column}', {column}, 'record', $1::text, 'at', now())))
            WHERE origin = 'inline' AND btrim({column}) = $2 AND document_id <> $1
            RETURNING document_id""",
        record_id,
        value,
    )
    withdrawn = sorted(str(r["document_id"]) for r in rows)
    if withdrawn:
        log.warning(
            "inline documents no longer claim the NCBI record's id",
            extra={"record": record_id, column: value, "documents": withdrawn},
        )
    return withdrawn


def _stored(doc_id: str, digest: str, title: str, c: Chunk) -> StoredChunk:
    return StoredChunk(
        chunk_id(doc_id, digest, c.ordinal),
        c.ordinal,
        embedding_text(title, c.section, c.text),
        c.token_count,
    )


async def delete_document(pool: asyncpg.Pool, doc_id: str) -> bool:
    """Remove a withdrawn document with its chunks and vectors; True if it existed."""
    result: str = await pool.execute("DELETE FROM documents WHERE document_id = $1", doc_id)
    return result.endswith(" 1")


async def chunks_missing_vectors(pool: asyncpg.Pool, doc_id: str) -> list[StoredChunk]:
    """Chunks of a stored document that have no vector in the active index yet.

    An unchanged document normally needs nothing; but if an earlier run stored it and died before its
    chunk events were published (or before they were embedded), these are the chunks to send again.
    """
    table = await pool.fetchval("SELECT table_name FROM vector_indexes WHERE state = 'active'")
    if table is None:
        rows = await pool.fetch(
            "SELECT chunk_id, ordinal, embedding_text, token_count FROM chunks WHERE document_id = $1 ORDER BY ordinal",
            doc_id,
        )
    else:
        rows = await pool.fetch(
            f"""SELECT c.chunk_id, c.ordinal, c.embedding_text, c.token_count
                FROM chunks c LEFT JOIN {table} v ON v.chunk_id = c.chunk_id
                WHERE c.document_id = $1 AND v.chunk_id IS NULL ORDER BY c.ordinal""",
            doc_id,
        )
    return [StoredChunk(r["chunk_id"], r["ordinal"], r["embedding_text"], r["token_count"]) for r in rows]
