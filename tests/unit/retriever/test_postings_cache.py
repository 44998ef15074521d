"""The retriever's cache of common terms' posting blocks: what it keeps, what it lets go, what it counts."""

from __future__ import annotations

from services.retriever.engine.lexical.blocks import POSTING
from services.retriever.engine.lexical.postings_cache import MIN_POSTINGS, PostingsCache
from shared.settings import RetrievalSettings


def _block(postings: int) -> bytes:
    return bytes(postings * POSTING.itemsize)


def test_least_recently_used_blocks_leave_first_within_the_byte_bound() -> None:
    cache = PostingsCache(3 * 10 * POSTING.itemsize, min_postings=10, posting_bytes=POSTING.itemsize)
    for block in (1, 2, 3):
        cache.put((block, "v"), _block(10))
    assert cache.get((1, "v")) is not None  # 1 is now the most recently used
    cache.put((4, "v"), _block(10))
    assert cache.get((2, "v")) is None and cache.get((1, "v")) is not None and cache.get((4, "v")) is not None
    assert cache.bytes_held == 3 * 10 * POSTING.itemsize
    assert (cache.counts.hits, cache.counts.misses) == (3, 1)


def test_small_and_oversized_blocks_are_not_kept_and_versions_are_distinct() -> None:
    cache = PostingsCache(100 * POSTING.itemsize, min_postings=10, posting_bytes=POSTING.itemsize)
    assert not cache.wants(9) and cache.wants(10)
    cache.put((1, "v"), _block(9))
    cache.put((2, "v"), _block(101))
    assert len(cache) == 0
    cache.put((3, "100"), _block(10))
    assert cache.get((3, "100")) is not None and cache.get((3, "101")) is None  # same id, another row version


def test_settings_size_the_cache_and_zero_turns_it_off() -> None:
    cache = PostingsCache.from_settings(RetrievalSettings(bm25_cache_mb=64))
    assert cache is not None and cache.max_bytes == 64 * 2**20 and cache.min_postings == MIN_POSTINGS
    assert PostingsCache.from_settings(RetrievalSettings(bm25_cache_mb=0)) is None
