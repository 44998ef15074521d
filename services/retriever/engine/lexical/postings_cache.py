"""Common terms' postings kept in the retriever's memory (:class:`~services.retriever.engine.lexical.blocks.
TermView`), so that a lexical search reads from the database only what it has not read lately, and neither
decodes nor saturates again what it has.

At 10^6 chunks a query's common terms carry most of its postings (a SciFact claim: a median 0.7 M, 8 MB; at
3x10^6, 2 M), and each search used to fetch them again: PostgreSQL detoasting the blocks and sending them, the
client copying them, decoding their keys and computing each posting's saturation. A term is held as a view of
all of its blocks; blocks are immutable (:data:`~services.retriever.engine.lexical.blocks.BlockKey`), so a view
is current exactly while the term's listed blocks are the view's: a write that appends a block to the term makes
the next search read that block alone and join it to the view; compaction, which replaces blocks, makes it read
the term again.

Only terms of at least ``min_postings`` postings are kept (common terms: rare terms are small and cheap to read,
and would crowd the cache out); least recently used out first, within ``max_bytes``, each view charged 19 bytes a
posting (:attr:`~services.retriever.engine.lexical.blocks.TermView.held_bytes`). `cachetools` provides the
byte-bounded LRU.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from cachetools import LRUCache

from services.retriever.engine.lexical.blocks import TermView
from shared.metrics import POSTINGS_CACHE_BYTES, POSTINGS_CACHE_TERMS

if TYPE_CHECKING:
    from shared.settings import RetrievalSettings

#: Terms of fewer postings are not kept: half of compaction's full block (8,192 postings), so that what is held
#: is the terms in more than ~0.5 % of a million chunks, never a rare term's few postings.
MIN_POSTINGS = 4096


@dataclass
class CacheCounts:
    """Terms served from memory and read (wholly or in part) from the database since the cache was made."""

    hits: int = 0
    misses: int = 0


class PostingsCache:
    """A byte-bounded LRU of terms' postings (:class:`TermView`), by term id."""

    def __init__(self, max_bytes: int, min_postings: int) -> None:
        self.max_bytes = max_bytes
        self.min_postings = min_postings
        self._terms: LRUCache[int, TermView] = LRUCache(maxsize=max(max_bytes, 1), getsizeof=lambda v: v.held_bytes)
        self.counts = CacheCounts()

    @classmethod
    def from_settings(cls, settings: RetrievalSettings) -> PostingsCache | None:
        """The cache ``EVIDENTIA_RETRIEVAL_BM25_CACHE_MB`` asks for (None at 0). Make one per process and keep
        it (the retriever's state holds it): a searcher made per request shares it."""
        if settings.bm25_cache_mb <= 0:
            return None
        return cls(settings.bm25_cache_mb * 2**20, MIN_POSTINGS)

    def wants(self, postings: int) -> bool:
        """Whether a term of ``postings`` postings is kept here."""
        return self.max_bytes > 0 and postings >= self.min_postings

    def get(self, term_id: int) -> TermView | None:
        """The view held of ``term_id`` (maybe of blocks the term no longer has: the caller compares)."""
        return self._terms.get(term_id)

    def count(self, hit: bool) -> None:
        """Count a term served from memory (``hit``) or read from the database."""
        if hit:
            self.counts.hits += 1
        else:
            self.counts.misses += 1
        POSTINGS_CACHE_TERMS.labels("hit" if hit else "miss").inc()

    def put(self, term_id: int, view: TermView) -> None:
        """Keep ``view`` as ``term_id``'s (least recently used terms leave to make room); one larger than the cache
        is not kept."""
        if not self.wants(len(view)):
            return
        view.allow_index()  # (held for many searches: the lookups of pruned searches in it cost less)
        if view.held_bytes <= self.max_bytes:
            self._terms[term_id] = view
            POSTINGS_CACHE_BYTES.set(self.bytes_held)

    @property
    def bytes_held(self) -> int:
        return int(self._terms.currsize)

    def __len__(self) -> int:
        return len(self._terms)
