"""Doc values on a real PostgreSQL 18 (the documents' change feed, engine/doc_values/follower.py): the
held columns agree with the SQL filter on every chunk; a follower sees every committed change, also one of a
transaction that began before another that committed first; a TRUNCATE or a pruned feed makes it read
everything again; and lexical search under filters returns the same with the values as without them."""

from __future__ import annotations

import random
import threading
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest
from prometheus_client import REGISTRY

from services.parser.store import store_document
from services.retriever.engine.doc_values import mesh
from services.retriever.engine.doc_values.columns import DocValues
from services.retriever.engine.doc_values.follower import DocValuesFollower, load, prune_changes
from services.retriever.engine.filters.fields import holds_all
from services.retriever.engine.lexical.postings import Bm25Scoring, corpus_counts
from services.retriever.engine.lexical.rank import Bm25Params, bm25_rank, bm25_search
from services.retriever.engine.lexical.stats import CorpusStats
from shared.models import MeshHeading, SearchFilters
from tests.integration.doc_values_data import MESH, SOURCES, STUDY_TYPES, filtered_doc, may_pass, sql_passing

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture
async def pool(private_pool: asyncpg.Pool) -> AsyncIterator[asyncpg.Pool]:
    rng = random.Random(3)
    for i in range(120):
        await store_document(private_pool, filtered_doc(i, rng))
    yield private_pool


def _random_filters(rng: random.Random) -> SearchFilters:
    spec: dict[str, Any] = {}
    if rng.random() < 0.5:
        spec["year_from"] = rng.choice([1999, 2010, 2015])
    if rng.random() < 0.4:
        spec["year_to"] = rng.choice([2010, 2016, 2020])
    if rng.random() < 0.4:
        spec["study_types"] = rng.sample(STUDY_TYPES[1:], rng.randint(1, 2))
    if rng.random() < 0.4:
        spec["min_evidence_level"] = rng.choice([0.0, 0.5, 0.7, 0.9])
    if rng.random() < 0.3:
        spec["sources"] = rng.sample(SOURCES, rng.randint(1, 2))
    if rng.random() < 0.3:
        spec["include_retracted"] = True
    if rng.random() < 0.3:
        spec["min_priority"] = rng.choice([10, 50, 100])
    if rng.random() < 0.4:
        spec["mesh"] = rng.sample([*MESH, "Rats"], rng.randint(1, 2))
        # held once the descendants are listed; with them still to be looked up, the values must let through
        # all that SQL passes
        spec["mesh_descendants"] = rng.random() < 0.3
    if rng.random() < 0.15:
        spec["journals"] = ["Lancet"]
    return SearchFilters.model_validate(spec)


async def _keys(pool: asyncpg.Pool) -> int:
    return int(await pool.fetchval("SELECT max(chunk_key) + 1 FROM bm25_chunks"))


async def test_the_values_agree_with_the_sql_filter_on_every_chunk(pool: asyncpg.Pool) -> None:
    values, _ = await load(pool)
    assert len(values) == await pool.fetchval("SELECT count(*) FROM bm25_chunks")
    rng = random.Random(8)
    held_whole = 0
    for _ in range(60):
        filters = _random_filters(rng)
        sql = await sql_passing(pool, filters)
        mine = await may_pass(pool, values, filters)
        if holds_all(filters):
            held_whole += 1
            assert mine == sql, filters
        else:
            assert sql <= mine, filters  # a pre-filter: never drops a chunk SQL passes
    assert held_whole >= 20


async def test_a_load_holds_its_rows_batch_by_batch_off_the_event_loop(
    pool: asyncpg.Pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reading everything holds each batch of rows on a worker thread: the searches on the event loop are not held
    up while a replica reads millions of rows (held on the loop, 50,000-row batches stalled it ~0.3 s each)."""
    from services.retriever.engine.doc_values import follower

    monkeypatch.setattr(follower, "LOAD_BATCH", 40)
    holders: list[int] = []
    put = DocValues.put

    def recorded(self: DocValues, *args: Any, **kwargs: Any) -> None:
        holders.append(threading.get_ident())
        put(self, *args, **kwargs)

    monkeypatch.setattr(DocValues, "put", recorded)
    values, _ = await load(pool)
    chunks = await pool.fetchval("SELECT count(*) FROM bm25_chunks")
    assert len(values) == chunks and len(holders) >= chunks // 40 >= 3
    assert threading.get_ident() not in holders


async def test_a_follower_sees_every_committed_change_in_flight_ones_included(pool: asyncpg.Pool) -> None:
    follower = DocValuesFollower(pool)
    assert await follower.current() is None  # starts reading everything
    await follower.start_loading()
    recent = SearchFilters(year_from=2030)
    assert (values := await follower.current()) is not None
    assert not await may_pass(pool, values, recent)

    first = await pool.fetchval("SELECT document_id FROM documents ORDER BY document_id LIMIT 1")
    second = await pool.fetchval("SELECT document_id FROM documents ORDER BY document_id OFFSET 1 LIMIT 1")
    async with pool.acquire() as a, pool.acquire() as b:
        ta = a.transaction()
        await ta.start()
        # A writes first (its transaction id is the older one) but commits last
        await a.execute(
            "UPDATE documents SET year = 2031, retracted = false, priority = 50 WHERE document_id = $1", first
        )
        async with b.transaction():
            await b.execute(
                "UPDATE documents SET year = 2032, retracted = false, priority = 50 WHERE document_id = $1", second
            )
        values = await follower.current()
        assert values is not None
        seen = await may_pass(pool, values, recent)
        assert seen == await sql_passing(pool, recent)  # B's chunks, not A's: A has not committed
        assert seen and all(
            d == second
            for d in await pool.fetchval(
                "SELECT array_agg(c.document_id) FROM bm25_chunks k JOIN chunks c USING (chunk_id) "
                "WHERE k.chunk_key = ANY($1::integer[])",
                sorted(seen),
            )
        )
        await ta.commit()
    values = await follower.current()
    assert values is not None
    # the follower's horizon stayed below A while it ran, so A's change is read now
    assert await may_pass(pool, values, recent) == await sql_passing(pool, recent)
    assert len(await sql_passing(pool, recent)) > len(seen)

    # a new document's chunks (new keys) are held once read, a deleted one's chunks fail nothing they pass
    await store_document(pool, filtered_doc(500, random.Random(1), year=2040))
    values = await follower.current()
    assert values is not None
    size = await _keys(pool)
    assert values.known[:size].sum() == await pool.fetchval("SELECT count(*) FROM bm25_chunks")
    assert await may_pass(pool, values, SearchFilters(year_from=2040)) == await sql_passing(
        pool, SearchFilters(year_from=2040)
    )
    await follower.stop()


async def test_a_truncate_or_a_pruned_feed_reads_everything_again(pool: asyncpg.Pool) -> None:
    follower = DocValuesFollower(pool)
    await follower.start_loading()
    assert await follower.current() is not None
    # pruned: rows this follower had not read were dropped (every row here is younger than ten minutes: prune
    # with nothing kept to force it)
    await pool.execute(
        "UPDATE documents SET year = 2050 WHERE document_id IN (SELECT document_id FROM documents LIMIT 3)"
    )
    await prune_changes(pool, kept_s=0.0)
    assert await pool.fetchval("SELECT count(*) FROM document_changes") == 0
    assert await follower.current() is None  # cannot know what it missed
    await follower.start_loading()
    values = await follower.current()
    assert values is not None
    later = SearchFilters(year_from=2050)
    assert await may_pass(pool, values, later) == await sql_passing(pool, later) != set()

    await pool.execute("TRUNCATE documents CASCADE")
    assert await follower.current() is None
    await follower.start_loading()
    values = await follower.current()
    assert values is not None and len(values) == 0
    await follower.stop()


def _held_back(action: str) -> float:
    return REGISTRY.get_sample_value("evidentia_retriever_doc_values_held_back_total", {"action": action}) or 0.0


async def test_a_long_transaction_never_makes_a_search_read_everything_changed_since_it_began(
    pool: asyncpg.Pool,
) -> None:
    """Issue 40 (10): a transaction left open holds the horizon where it began; a read of the feed takes in at most
    ``max_refresh_documents`` documents, past that the search checks its filters in SQL (None), and once the
    horizon moves everything is read again, once."""
    follower = DocValuesFollower(pool, max_refresh_documents=5, reload_after_s=0.0)
    await follower.start_loading()
    assert await follower.current() is not None
    ids = [r[0] for r in await pool.fetch("SELECT document_id FROM documents ORDER BY document_id LIMIT 9")]
    moved = SearchFilters(year_from=2061)
    async with pool.acquire() as long:
        open_transaction = long.transaction()
        await open_transaction.start()
        await long.fetchval("SELECT pg_current_xact_id()")  # it writes: the horizon stays where it began
        await pool.execute(
            "UPDATE documents SET year = 2061, retracted = false, priority = 50 WHERE document_id = $1", ids[0]
        )
        values = await follower.current()  # a few changes: read as ever
        assert values is not None and await may_pass(pool, values, moved) == await sql_passing(pool, moved) != set()
        for doc in ids[1:]:  # eight transactions, each committed, all past the held horizon
            await pool.execute(
                "UPDATE documents SET year = 2062, retracted = false, priority = 50 WHERE document_id = $1", doc
            )
        waited, reloaded = _held_back("wait"), _held_back("reload")
        for _ in range(3):
            assert await follower.current() is None  # the search checks its filters in SQL
        assert _held_back("wait") == waited + 3 and _held_back("reload") == reloaded
        assert follower.loaded  # nothing read again while the horizon cannot move
        assert REGISTRY.get_sample_value("evidentia_retriever_doc_values_pending_documents") == 6
        await open_transaction.rollback()
    assert await follower.current() is None  # the horizon moved: everything is read again, in the background
    assert _held_back("reload") == reloaded + 1
    await follower.start_loading()
    values = await follower.current()
    assert values is not None and await may_pass(pool, values, moved) == await sql_passing(pool, moved)
    assert len(await sql_passing(pool, moved)) > len(
        await sql_passing(pool, SearchFilters(year_from=2061, year_to=2061))
    )
    await follower.stop()


async def _bm25(
    pool: asyncpg.Pool, query: str, filters: SearchFilters, values: DocValues | None, k: int = 10
) -> list[tuple[str, float]]:
    p = Bm25Params()
    scoring = Bm25Scoring(p.k1, p.b, p.title_weight, p.section_weight, await corpus_counts(pool))
    hits = await bm25_rank(pool, query, k, filters, scoring, filter_first_max=0, doc_values=values)
    return [(h.chunk_id, round(h.score, 6)) for h in hits]


async def test_lexical_search_is_the_same_with_the_values_as_without(pool: asyncpg.Pool) -> None:
    rng = random.Random(5)
    # relevance against the filter: the best chunks for "aspirin" are all from 2001, the filter asks for 2020
    for i in range(40):
        text = "Aspirin aspirin aspirin and bleeding." if i < 30 else "Aspirin and bleeding risk."
        await store_document(pool, filtered_doc(1000 + i, rng, year=2001 if i < 30 else 2020, text=text))
    values, _ = await load(pool)
    queries = ["aspirin bleeding", "statins stroke outcomes", "dementia cohort part", "myocardial infarction"]
    for filters in [SearchFilters(year_from=2020), *(_random_filters(rng) for _ in range(25))]:
        for query in queries:
            assert await _bm25(pool, query, filters, values) == await _bm25(pool, query, filters, None), filters
    # the whole path, with a follower: the same hits as the SQL checks find
    follower = DocValuesFollower(pool)
    await follower.start_loading()
    recent = SearchFilters(year_from=2020, study_types=["randomized-controlled-trial", "cohort"])
    with_values = await bm25_search(pool, "aspirin", 10, recent, Bm25Params(), CorpusStats(), doc_values=follower)
    without = await bm25_search(pool, "aspirin", 10, recent, Bm25Params(), CorpusStats())
    assert with_values == without and with_values
    await follower.stop()


async def test_a_mesh_filter_against_relevance_checks_about_k_candidates_with_the_headings_held(
    pool: asyncpg.Pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The best chunks for "aspirin" lack the heading asked for (docs/benchmarks.md: a MeSH "Humans" filter
    checked 14,469 candidates a search in SQL at 10^6 chunks): with the headings held the leg checks about k,
    with the same hits; a changed document's headings are followed."""
    rng = random.Random(6)
    for i in range(60):
        # lengths differ: no two documents tie (a check pass takes ties at its end in)
        text = "Aspirin aspirin aspirin and bleeding." if i < 50 else "Aspirin and bleeding" + " risk" * (i - 49)
        doc = filtered_doc(2000 + i, rng, year=2018, text=text)
        headings = [MeshHeading(descriptor="Mice")] if i < 50 else [MeshHeading(descriptor="Humans")]
        await store_document(pool, doc.model_copy(update={"mesh": headings, "priority": 50, "retracted": False}))
    checked: list[int] = []
    fetch = asyncpg.Connection.fetch

    async def counting(self: asyncpg.Connection, sql: str, *args: Any, **kw: Any) -> Any:
        if "b.chunk_key = ANY" in sql:
            checked.append(len(args[0]))
        return await fetch(self, sql, *args, **kw)

    follower = DocValuesFollower(pool)
    await follower.start_loading()
    monkeypatch.setattr(asyncpg.Connection, "fetch", counting)
    humans = SearchFilters(mesh=["Humans"], mesh_descendants=False)
    assert holds_all(humans)
    with_values = await bm25_search(pool, "aspirin", 5, humans, Bm25Params(), CorpusStats(), doc_values=follower)
    with_checked, checked[:] = sum(checked), []
    without = await _bm25(pool, "aspirin", humans, None, k=5)  # checked in SQL, not resolved first
    assert [(h.chunk_id, round(h.score, 6)) for h in with_values] == without and len(without) == 5
    # k and the margin (and a document's other chunks, tied), against every "Mice" chunk first without them
    assert with_checked <= 9 and sum(checked) > 100
    # documents' headings changed: followed (the descriptors' lists built again, on a thread, once enough new
    # sets came in), and the values agree with SQL again
    monkeypatch.setattr(mesh, "RELIST_AFTER", 0)
    listed = len((await follower.current() or DocValues()).mesh)
    moved = [r[0] for r in await pool.fetch("SELECT document_id FROM documents WHERE mesh_terms = '{Mice}' LIMIT 8")]
    for i, document_id in enumerate(moved):
        await pool.execute(
            "UPDATE documents SET mesh_terms = $2 WHERE document_id = $1", document_id, ["Zebrafish", "Humans", f"X{i}"]
        )
    values = await follower.current()
    assert values is not None and len(values.mesh) >= listed + 8 > listed and not values.mesh.stale
    for filters in (SearchFilters(mesh=["Zebrafish"], mesh_descendants=False), humans):
        assert await may_pass(pool, values, filters) == await sql_passing(pool, filters) != set()
    await follower.stop()


async def test_chunks_written_after_the_values_were_read_may_still_pass(pool: asyncpg.Pool) -> None:
    values, _ = await load(pool)  # not followed: the new document's chunks are unknown to it
    doc = filtered_doc(900, random.Random(2), year=2044, text="Colchicine after myocardial infarction.")
    await store_document(pool, doc.model_copy(update={"priority": 50, "retracted": False}))
    hits = await _bm25(pool, "colchicine", SearchFilters(year_from=2044), values)
    assert hits and {h[0].split("#")[0] for h in hits} == {doc.document_id}
