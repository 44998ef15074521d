"""Documents with every filter column varied, and the two sides of a doc-values check (the chunks SQL passes, the
chunks the held values let through), for the doc-values tests on one database and on a read replica."""

from __future__ import annotations

import random

import asyncpg
import numpy as np

from services.retriever.engine.doc_values.columns import DocValues
from services.retriever.engine.filters.fields import where_clause
from shared.models import Chunk, Journal, MeshHeading, ParsedDocument, SearchFilters

STUDY_TYPES = [None, "randomized-controlled-trial", "cohort", "meta-analysis"]
SOURCES = ["pubmed", "pmc", "bookshelf"]
MESH = ["Humans", "Stroke", "Dementia", "Mice"]


def filtered_doc(i: int, rng: random.Random, *, year: int | None = None, text: str | None = None) -> ParsedDocument:
    body = text or f"Statins and {rng.choice(['stroke', 'myocardial infarction', 'dementia'])} outcomes, cohort {i}."
    chunks = [
        Chunk(section="Abstract", ordinal=o, text=f"{body} Part {o}.", token_count=9, char_start=0, char_end=9)
        for o in range(1 + i % 3)
    ]
    return ParsedDocument(
        source=rng.choice(SOURCES),  # type: ignore[arg-type]
        source_id=str(70_000 + i),
        title=f"Study {i}",
        abstract=body,
        year=year if year is not None else rng.choice([None, 1999, 2010, 2015, 2016, 2020]),
        study_type=rng.choice(STUDY_TYPES),  # type: ignore[arg-type]
        evidence_level=rng.choice([None, 0.2, 0.5, 0.7, 0.9, 1.0]),
        retracted=rng.random() < 0.1,
        journal=Journal(title=rng.choice(["Lancet", "BMJ"])),
        mesh=[MeshHeading(descriptor=d) for d in rng.sample(MESH, rng.randint(0, 3))],
        chunks=chunks,
        priority=rng.choice([0, 10, 50, 50, 100]),
    )


async def sql_passing(pool: asyncpg.Pool, filters: SearchFilters) -> set[int]:
    where, params = where_clause(filters, 1)
    rows = await pool.fetch(
        "SELECT b.chunk_key FROM bm25_chunks b JOIN chunks c ON c.chunk_id = b.chunk_id "
        f"JOIN documents d ON d.document_id = c.document_id WHERE {where}",
        *params,
    )
    return {int(r[0]) for r in rows}


async def may_pass(pool: asyncpg.Pool, values: DocValues, filters: SearchFilters) -> set[int]:
    """The stored chunks' keys the values let through (keys of no stored chunk have no postings: not asked)."""
    stored = np.array([r[0] for r in await pool.fetch("SELECT chunk_key FROM bm25_chunks")], dtype=np.int64)
    size = int(stored.max()) + 1 if len(stored) else 0
    return set(stored[values.may_pass(size, filters)[stored]].tolist())
