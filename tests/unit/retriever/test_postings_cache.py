"""The retriever's cache of common terms' postings: what it keeps, what it lets go, what it counts."""

from __future__ import annotations

import numpy as np

from services.retriever.engine.lexical.blocks import POSTING, KeyIndex, TermView
from services.retriever.engine.lexical.postings_cache import MIN_POSTINGS, PostingsCache
from shared.settings import RetrievalSettings

#: What a held view is charged a posting: its 11 packed bytes, its 4-byte key and its 4-byte saturation.
HELD = POSTING.itemsize + 8


def _view(postings: int, block: int = 1) -> TermView:
    packed = np.zeros(postings, dtype=POSTING)
    packed["key"] = np.arange(postings)
    return TermView.of({(block, "v"): packed.tobytes()})


def _sparse(postings: int) -> TermView:
    """A view of ``postings`` keys, one in every 1,000: too sparse for a key index to pay."""
    packed = np.zeros(postings, dtype=POSTING)
    packed["key"] = np.arange(postings) * 1000
    return TermView.of({(1, "v"): packed.tobytes()})


def test_least_recently_used_terms_leave_first_within_the_byte_bound() -> None:
    cache = PostingsCache(3 * 10 * HELD, min_postings=10)
    for term in (1, 2, 3):
        cache.put(term, _sparse(10))
    assert cache.get(1) is not None  # 1 is now the most recently used
    cache.put(4, _sparse(10))
    assert cache.get(2) is None and cache.get(1) is not None and cache.get(4) is not None
    assert cache.bytes_held == 3 * 10 * HELD and len(cache) == 3


def test_a_kept_common_term_has_its_keys_indexed_and_charged_for() -> None:
    """A dense term (in every chunk here) is kept with a key index allowed, its bytes counted from then on; a sparse
    one without."""
    cache = PostingsCache(1 << 20, min_postings=10)
    dense, sparse = _view(1000), _sparse(1000)
    cache.put(1, dense)
    cache.put(2, sparse)
    assert dense.indexed and not sparse.indexed and not dense.index_built  # (built by a search's many lookups)
    assert cache.bytes_held == 2 * 1000 * HELD + KeyIndex.bytes_for(dense.keys)
    assert KeyIndex.bytes_for(dense.keys) == 16 * 12  # 1,000 keys: 16 words of 64, 12 bytes each


def test_small_and_oversized_terms_are_not_kept() -> None:
    cache = PostingsCache(100 * HELD, min_postings=10)
    assert not cache.wants(9) and cache.wants(10)
    cache.put(1, _view(9))
    cache.put(2, _view(101))
    assert len(cache) == 0
    cache.put(3, _view(10, block=7))
    held = cache.get(3)
    assert held is not None and held.blocks == {(7, "v")}  # the caller compares the blocks with its listing


def test_hits_and_misses_are_counted() -> None:
    cache = PostingsCache(1 << 20, min_postings=1)
    cache.count(hit=True)
    cache.count(hit=False)
    cache.count(hit=False)
    assert (cache.counts.hits, cache.counts.misses) == (1, 2)


def test_settings_size_the_cache_and_zero_turns_it_off() -> None:
    cache = PostingsCache.from_settings(RetrievalSettings(bm25_cache_mb=64))
    assert cache is not None and cache.max_bytes == 64 * 2**20 and cache.min_postings == MIN_POSTINGS
    assert PostingsCache.from_settings(RetrievalSettings(bm25_cache_mb=0)) is None
