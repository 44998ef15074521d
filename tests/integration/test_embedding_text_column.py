"""The store computes ``chunks.embedding_text`` (migration 222) exactly as the parser's chunker lays it out:
what the embedder embeds and the reranker reads is one text, whichever side produces it."""

from __future__ import annotations

import asyncpg
import pytest

from services.parser.chunking import embedding_text
from services.parser.store import store_document
from shared.db import create_pool
from shared.models import Chunk, ParsedDocument
from shared.settings import DatabaseSettings

pytestmark = [pytest.mark.integration]

CASES = [
    ("Statins after stroke", "Results > Subgroups", "Mortality fell.\nIn all arms."),
    ("Statins after stroke", None, "Abstract text without a section."),
    ("", "Methods", "A chunk of a document without a title."),
]


async def test_the_stored_embedding_text_is_the_chunkers_layout(migrated_postgres_url: str) -> None:
    pool: asyncpg.Pool = await create_pool(
        DatabaseSettings.model_validate({"EVIDENTIA_DATABASE_URL": migrated_postgres_url})
    )
    try:
        for i, (title, section, text) in enumerate(CASES):
            doc = ParsedDocument(
                source="pubmed",
                source_id=str(70_000 + i),
                pmid=str(70_000 + i),
                title=title,
                chunks=[Chunk(section=section, ordinal=0, text=text, token_count=5, char_start=0, char_end=len(text))],
            )
            result = await store_document(pool, doc)
            stored = await pool.fetchval(
                "SELECT embedding_text FROM chunks WHERE chunk_id = $1", result.chunks[0].chunk_id
            )
            assert stored == embedding_text(title, section, text) == result.chunks[0].embedding_text
        # Not a stored copy: a direct UPDATE of the text is what a reader sees next.
        await pool.execute("UPDATE chunks SET content = 'Changed.' WHERE document_id = 'pubmed:70001'")
        assert await pool.fetchval(
            "SELECT embedding_text FROM chunks WHERE document_id = 'pubmed:70001'"
        ) == embedding_text("Statins after stroke", None, "Changed.")
    finally:
        await pool.close()
