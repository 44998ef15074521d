"""The lexical postings of chunks stored without them (a bulk load's), built a batch of chunks at a time.

PostgreSQL analyses the text with the live path's own analysis (``chunk_tsvector``, the insert trigger's) into
one staged row a (chunk, term) with the term's counts in the title, section and text, computed from the same
``unnest(tsvector)`` weights the trigger counts; the term ids, document frequencies and the chunks' keys and
field lengths are written set-wise as the trigger writes them. The postings then leave the server as fixed-width
binary COPY rows, and numpy sorts and packs them into blocks (the format's one encoder,
:func:`~services.retriever.engine.lexical.blocks.encode_blocks`) that are COPYed back: no per-posting SQL
expression, which is most of what the trigger's set-wise build costs.

Each batch is one transaction under the lexical writers' lock (as the trigger's): searches see a batch's chunks
all at once or not at all, and the statistics always match the postings. The result is the trigger's index for
the same chunks: the same df, field lengths and postings (chunk keys are issued in chunk id order; blocks are
laid out by the block size, and terms left with a small block are marked for the compaction as the trigger's).
"""

from __future__ import annotations

from dataclasses import dataclass

import asyncpg
import numpy as np

from services.retriever.engine.lexical.blocks import (
    BLOCK_COLUMNS,
    BLOCK_POSTINGS,
    block_row,
    encode_blocks,
    pack_postings,
)

#: The lexical writers' lock (``bm25_add``/``bm25_remove`` take it for their transaction).
_WRITER_LOCK = "SELECT pg_advisory_xact_lock(4542054, 14)"

_BATCH = """
CREATE TEMP TABLE bulk_batch_in ON COMMIT DROP AS
SELECT c.chunk_id FROM chunks c
WHERE c.chunk_id > $1 AND NOT EXISTS (SELECT 1 FROM bm25_chunks b WHERE b.chunk_id = c.chunk_id)
ORDER BY c.chunk_id LIMIT $2
"""

# A lexeme's weights hold one letter a position: A the title's, B the section's, the rest the text's.
_TERMS = """
CREATE TEMP TABLE bulk_terms_in ON COMMIT DROP AS
SELECT s.chunk_id, x.lexeme,
       cardinality(array_positions(x.weights, 'A')) AS tf_title,
       cardinality(array_positions(x.weights, 'B')) AS tf_section,
       cardinality(x.weights) - cardinality(array_positions(x.weights, 'A'))
           - cardinality(array_positions(x.weights, 'B')) AS tf_text
FROM bulk_batch_in s JOIN chunks c USING (chunk_id),
     unnest(chunk_tsvector(c.doc_title, c.section, c.content)) AS x
WHERE cardinality(x.weights) > 0
"""

_NEW_TERMS = """
INSERT INTO bm25_terms (term)
SELECT DISTINCT f.lexeme FROM bulk_terms_in f
WHERE NOT EXISTS (SELECT 1 FROM bm25_terms t WHERE t.term = f.lexeme)
ORDER BY 1
ON CONFLICT (term) DO NOTHING
"""

_DF = """
UPDATE bm25_terms t SET df = t.df + d.n
FROM (SELECT lexeme, count(*) AS n FROM bulk_terms_in GROUP BY lexeme) d
WHERE t.term = d.lexeme
"""

# Every chunk of the batch gets its row, one without any term too (zero lengths, as the trigger writes it).
_CHUNKS = """
CREATE TEMP TABLE bulk_keys_in ON COMMIT DROP AS
WITH added AS (
    INSERT INTO bm25_chunks (chunk_id, len_title, len_section, len_text)
    SELECT s.chunk_id, coalesce(sum(f.tf_title), 0), coalesce(sum(f.tf_section), 0), coalesce(sum(f.tf_text), 0)
    FROM bulk_batch_in s LEFT JOIN bulk_terms_in f USING (chunk_id)
    GROUP BY s.chunk_id
    ORDER BY s.chunk_id
    RETURNING chunk_id, chunk_key, len_title, len_section, len_text)
SELECT * FROM added
"""

#: The postings out, every column int4: one fixed-width binary COPY row each (:data:`_ROW`).
_POSTINGS = """
SELECT t.term_id, k.chunk_key, f.tf_text::int4, f.tf_title::int4, f.tf_section::int4,
       k.len_text::int4, k.len_title::int4, k.len_section::int4
FROM bulk_terms_in f JOIN bm25_terms t ON t.term = f.lexeme JOIN bulk_keys_in k USING (chunk_id)
"""

_FIELDS = ("term_id", "key", "tf_text", "tf_title", "tf_section", "len_text", "len_title", "len_section")
#: A binary COPY row of :data:`_POSTINGS`: the field count, then each field's length and its int4.
_ROW = np.dtype([("count", ">i2")] + [item for f in _FIELDS for item in ((f"{f}_len", ">i4"), (f, ">i4"))])
#: A row as kept: native int32 fields.
_PARSED = np.dtype([(f, np.int32) for f in _FIELDS])
#: Binary COPY's header: signature, flags, header extension length.
_HEADER = len(b"PGCOPY\n\xff\r\n\x00") + 4 + 4
_TRAILER = 2


@dataclass(frozen=True)
class PostingsBatch:
    """What one :func:`index_batch` did: chunks indexed, the last chunk id (the next batch starts after it),
    postings and blocks written."""

    chunks: int
    last_id: str
    postings: int
    blocks: int


class _CopyRows:
    """Collects a binary COPY stream of :data:`_ROW` rows, parsed into arrays as it arrives (memory: the
    arrays, not the stream)."""

    def __init__(self) -> None:
        self._pending = bytearray()
        self._started = False
        self.parts: list[np.ndarray] = []

    async def __call__(self, data: bytes) -> None:
        self._pending += data
        if not self._started and len(self._pending) >= _HEADER:
            del self._pending[:_HEADER]
            self._started = True
        if self._started and len(self._pending) >= 1 << 22:
            self._take(len(self._pending) // _ROW.itemsize)

    def _take(self, rows: int) -> None:
        if rows:
            raw = np.frombuffer(bytes(self._pending[: rows * _ROW.itemsize]), dtype=_ROW)
            part = np.empty(rows, dtype=_PARSED)
            for f in _FIELDS:
                part[f] = raw[f]
            self.parts.append(part)
            del self._pending[: rows * _ROW.itemsize]

    def rows(self) -> np.ndarray:
        """Every row of the finished stream (its trailer dropped)."""
        body = len(self._pending) - _TRAILER
        if body % _ROW.itemsize:
            raise ValueError(f"binary COPY stream of {len(self._pending)} bytes is not whole rows of {_ROW.itemsize}")
        self._take(body // _ROW.itemsize)
        return np.concatenate(self.parts) if self.parts else np.empty(0, dtype=_PARSED)


async def index_batch(
    conn: asyncpg.Connection, after: str, limit: int, *, block_postings: int = BLOCK_POSTINGS
) -> PostingsBatch:
    """Index up to ``limit`` chunks without postings, in chunk id order after ``after``, in one transaction
    (module doc). ``chunks`` is 0 when none was left."""
    async with conn.transaction():
        await conn.execute(_WRITER_LOCK)
        n = int((await conn.execute(_BATCH, after, limit)).rsplit(" ", 1)[-1])
        if not n:
            return PostingsBatch(0, after, 0, 0)
        last_id = str(await conn.fetchval("SELECT max(chunk_id) FROM bulk_batch_in"))
        await conn.execute(_TERMS)
        await conn.execute("ANALYZE bulk_batch_in; ANALYZE bulk_terms_in")  # a sample: hash joins, not loops
        await conn.execute(_NEW_TERMS)
        await conn.execute(_DF)
        await conn.execute(_CHUNKS)
        sink = _CopyRows()
        await conn.copy_from_query(_POSTINGS, output=sink, format="binary")
        rows = sink.rows()
        order = np.argsort((rows["term_id"].astype(np.int64) << 32) | rows["key"].astype(np.int64))
        rows = rows[order]
        postings = pack_postings(
            rows["key"],
            rows["tf_text"],
            rows["tf_title"],
            rows["tf_section"],
            rows["len_text"],
            rows["len_title"],
            rows["len_section"],
        )
        blocks = encode_blocks(rows["term_id"], postings, block_postings)
        if blocks:
            await conn.copy_records_to_table(
                "bm25_blocks", records=[block_row(term, block) for term, block in blocks], columns=BLOCK_COLUMNS
            )
            # Terms left with a block below the size: the compaction merges them with their other small blocks.
            await conn.execute(
                "INSERT INTO bm25_pending (term_id) SELECT DISTINCT unnest($1::integer[]) ON CONFLICT DO NOTHING",
                [term for term, block in blocks if block.n < block_postings],
            )
        for table in ("bulk_keys_in", "bulk_terms_in", "bulk_batch_in"):
            await conn.execute(f"DROP TABLE {table}")
    return PostingsBatch(n, last_id, len(postings), len(blocks))
