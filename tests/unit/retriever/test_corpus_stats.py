"""The corpus counts BM25 needs: a small store is counted within each search (its statistics change fast);
a large one's are cached, and once expired, searches keep the cached ones while one background read fetches
the new (counting a large store must not land inside a search); and the size up to which a filter is
resolved first, which depends on the corpus size."""

from __future__ import annotations

import asyncio
import math
from typing import Any

import pytest

from services.retriever.engine.filters import passing
from services.retriever.engine.lexical import stats as search
from services.retriever.engine.lexical.postings import Bm25Scoring, CorpusCounts


class SlowCounts:
    def __init__(self) -> None:
        self.calls = 0
        self.release = asyncio.Event()
        self.fail = False

    async def __call__(self, pool: Any) -> CorpusCounts:
        self.calls += 1
        if self.calls > 1:
            await self.release.wait()
        if self.fail:
            raise OSError("database gone")
        return CorpusCounts(self.calls * 100, 1.0, 0.0, 10.0)


async def test_an_expired_value_is_served_while_one_refresh_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    counts = SlowCounts()
    monkeypatch.setattr(search, "corpus_counts", counts)
    stats = search.CorpusStats(ttl_s=0.0, sync_below=50)  # 100 chunks count as a large store here
    assert (await stats.get(None)).chunks == 100  # the first call waits for the store
    # Expired: every caller gets the cached value at once; one refresh is started, not one per caller.
    values = await asyncio.gather(*(stats.get(None) for _ in range(5)))
    assert [v.chunks for v in values] == [100] * 5
    await asyncio.sleep(0)
    assert counts.calls == 2
    counts.release.set()
    await asyncio.sleep(0.01)
    assert stats._refresh is not None and stats._refresh.done()
    assert (await stats.get(None)).chunks == 200


async def test_a_failed_refresh_keeps_the_cached_value(monkeypatch: pytest.MonkeyPatch) -> None:
    counts = SlowCounts()
    monkeypatch.setattr(search, "corpus_counts", counts)
    stats = search.CorpusStats(ttl_s=0.0, sync_below=50)
    await stats.get(None)
    counts.fail = True
    counts.release.set()
    await stats.get(None)
    await asyncio.sleep(0.01)
    assert counts.calls == 2
    assert (await stats.get(None)).chunks == 100  # still the cached counts; a new refresh was started
    await asyncio.sleep(0.01)
    assert counts.calls == 3


async def test_an_empty_store_is_counted_again_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = iter([CorpusCounts(0, 0.0, 0.0, 0.0), CorpusCounts(7, 1.0, 0.0, 10.0)])

    async def counts(pool: Any) -> CorpusCounts:
        return next(seen)

    monkeypatch.setattr(search, "corpus_counts", counts)
    stats = search.CorpusStats()  # the default 60 s: nothing has expired
    assert (await stats.get(None)).chunks == 0
    assert (await stats.get(None)).chunks == 7  # not the stale zero: the first documents count at once


async def test_a_small_store_is_counted_by_every_search_and_a_large_one_only_when_expired(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A store filling up: a count cached while it held 3 chunks would give the lexical leg N = 3 (a term in
    # 12 chunks would get a negative IDF) until it expired; that is how a consult found no lexical hits.
    sizes = iter([3, 12, 20_000, 30_000])
    reads = 0

    async def counts(pool: Any) -> CorpusCounts:
        nonlocal reads
        reads += 1
        return CorpusCounts(next(sizes), 1.0, 0.0, 10.0)

    monkeypatch.setattr(search, "corpus_counts", counts)
    stats = search.CorpusStats(small_ttl_s=0.0)  # every search finds a small store's counts old enough
    assert [(await stats.get(None)).chunks for _ in range(3)] == [3, 12, 20_000]
    assert [(await stats.get(None)).chunks for _ in range(3)] == [20_000] * 3  # large and fresh: cached
    assert reads == 3


async def test_the_legs_of_one_search_share_a_small_stores_count(monkeypatch: pytest.MonkeyPatch) -> None:
    reads = 0

    async def counts(pool: Any) -> CorpusCounts:
        nonlocal reads
        reads += 1
        return CorpusCounts(40 + reads, 1.0, 0.0, 10.0)

    monkeypatch.setattr(search, "corpus_counts", counts)
    stats = search.CorpusStats(small_ttl_s=0.2)
    assert [(await stats.get(None)).chunks for _ in range(3)] == [41] * 3  # one search's legs: one read
    await asyncio.sleep(0.25)
    assert (await stats.get(None)).chunks == 42  # a moment later: read again, within the search
    assert reads == 2


async def test_concurrent_searches_of_a_small_store_share_one_count(monkeypatch: pytest.MonkeyPatch) -> None:
    reads = 0

    async def counts(pool: Any) -> CorpusCounts:
        nonlocal reads
        reads += 1
        await asyncio.sleep(0.01)
        return CorpusCounts(5, 1.0, 0.0, 10.0)

    monkeypatch.setattr(search, "corpus_counts", counts)
    stats = search.CorpusStats()
    assert [v.chunks for v in await asyncio.gather(*(stats.get(None) for _ in range(6)))] == [5] * 6
    assert reads == 1


def test_stale_counts_never_make_idf_negative() -> None:
    scoring = Bm25Scoring(0.9, 0.4, 1.0, 0.0, CorpusCounts(3, 1.0, 0.0, 10.0))
    assert scoring.idf(12) == pytest.approx(math.log1p(0.5 / 12.5))  # N taken as df: small, never negative
    assert scoring.idf(1) > scoring.idf(3)


def test_the_filter_first_bound_grows_with_the_square_root_of_k_times_n() -> None:
    assert passing.filter_first_max(100, 1_000_000) == 10_000  # break-even: s*N = k/s
    assert passing.filter_first_max(100, 10_000_000) == 31_622
    assert passing.filter_first_max(20, 1_000) == passing.FILTER_FIRST_MAX_CHUNKS  # never below the floor
    assert passing.filter_first_max(0, 0) == passing.FILTER_FIRST_MAX_CHUNKS
