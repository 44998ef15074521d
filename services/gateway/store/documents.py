"""What the gateway reads of the store: one document's identity (for its deletion), which documents are not
stored yet (``/v1/ask``'s live fetch), the MeSH headings in use
(the vocabulary query enhancement maps terms to), and whether the database answers at all (readiness); and the
one thing it writes of a document, its search priority."""

from __future__ import annotations

from collections.abc import Sequence

import asyncpg


async def stored_document(pool: asyncpg.Pool, document_id: str) -> asyncpg.Record | None:
    """``source``, ``source_id`` and ``origin`` of a stored document, or None when it is not stored."""
    row: asyncpg.Record | None = await pool.fetchrow(
        "SELECT source, source_id, origin FROM documents WHERE document_id = $1", document_id
    )
    return row


async def unknown_documents(pool: asyncpg.Pool, document_ids: Sequence[str]) -> list[str]:
    """Those of ``document_ids`` neither stored nor known to the pipeline (no status), in order."""
    rows = await pool.fetch(
        """SELECT i FROM unnest($1::text[]) WITH ORDINALITY AS u(i, n)
           WHERE NOT EXISTS (SELECT 1 FROM documents d WHERE d.document_id = u.i)
             AND NOT EXISTS (SELECT 1 FROM document_status s WHERE s.document_id = u.i)
           ORDER BY n""",
        list(document_ids),
    )
    return [str(r["i"]) for r in rows]


async def set_priority(pool: asyncpg.Pool, document_id: str, priority: int) -> bool:
    """Set a stored document's search priority (its chunks read it through their document); False when the
    document is not stored."""
    row = await pool.fetchval(
        "UPDATE documents SET priority = $2 WHERE document_id = $1 RETURNING 1", document_id, priority
    )
    return row is not None


async def mesh_vocabulary(pool: asyncpg.Pool, limit: int = 20_000) -> dict[str, int]:
    """{MeSH heading: number of stored documents indexed with it}, the ``limit`` most used."""
    rows = await pool.fetch(
        """SELECT term, count(*) AS uses FROM documents, unnest(mesh_terms) AS term
           GROUP BY term ORDER BY uses DESC LIMIT $1""",
        limit,
    )
    return {str(r["term"]): int(r["uses"]) for r in rows}


async def database_ready(pool: asyncpg.Pool) -> bool:
    """Whether PostgreSQL answers a statement."""
    return bool(await pool.fetchval("SELECT 1"))
