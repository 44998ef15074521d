"""Common terms' posting blocks kept in the retriever's memory, so that a lexical search reads from the
database only what it has not read lately.

At 10^6 chunks a query's common terms carry most of its postings (a SciFact claim: a median 0.7 M, 8 MB),
and each search used to fetch them again: PostgreSQL detoasting the blocks and sending them, the client
copying them. A block is **immutable** (``bm25_blocks``: compaction writes merged postings as new blocks
and deletes the old ones; nothing updates a block in place), so its id and row version name one content
for good: a cached block is never stale, and a deleted one is simply never asked for again and ages out.

Only blocks of at least ``min_postings`` postings are kept (the full blocks of common terms: rare terms'
blocks are small and cheap to read, and would crowd the cache out); least recently used out first, within
``max_bytes``. `cachetools` provides the byte-bounded LRU.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from cachetools import LRUCache

from services.retriever.engine.lexical.blocks import POSTING
from shared.metrics import POSTINGS_CACHE_BLOCKS, POSTINGS_CACHE_BYTES

if TYPE_CHECKING:
    from shared.settings import RetrievalSettings

#: A block's identity: its id and the row version that wrote it (``xmin``), so that even a database whose
#: identity sequence was reset cannot hand an old entry a new block's id.
BlockKey = tuple[int, str]

#: Blocks of fewer postings are not kept: half of compaction's full block (8,192 postings), so that what is
#: held is the full blocks of terms in more than ~0.5 % of a million chunks, never a rare term's few postings.
MIN_POSTINGS = 4096


@dataclass
class CacheCounts:
    """Blocks served from memory and read from the database since the cache was made."""

    hits: int = 0
    misses: int = 0


class PostingsCache:
    """A byte-bounded LRU of packed posting blocks (``bytes``), by :data:`BlockKey`."""

    def __init__(self, max_bytes: int, min_postings: int, posting_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.min_postings = min_postings
        self._posting_bytes = posting_bytes
        self._blocks: LRUCache[BlockKey, bytes] = LRUCache(maxsize=max(max_bytes, 1), getsizeof=len)
        self.counts = CacheCounts()

    @classmethod
    def from_settings(cls, settings: RetrievalSettings) -> PostingsCache | None:
        """The cache ``EVIDENTIA_RETRIEVAL_BM25_CACHE_MB`` asks for (None at 0). Make one per process and keep
        it (the retriever's state holds it): a searcher made per request shares it."""
        if settings.bm25_cache_mb <= 0:
            return None
        return cls(settings.bm25_cache_mb * 2**20, MIN_POSTINGS, POSTING.itemsize)

    def wants(self, postings: int) -> bool:
        """Whether a block of ``postings`` postings is kept here."""
        return self.max_bytes > 0 and postings >= self.min_postings

    def get(self, key: BlockKey) -> bytes | None:
        blob = self._blocks.get(key)
        if blob is None:
            self.counts.misses += 1
            POSTINGS_CACHE_BLOCKS.labels("miss").inc()
        else:
            self.counts.hits += 1
            POSTINGS_CACHE_BLOCKS.labels("hit").inc()
        return blob

    def put(self, key: BlockKey, blob: bytes) -> None:
        """Keep ``blob`` (least recently used blocks leave to make room); one larger than the cache is not kept."""
        if len(blob) <= self.max_bytes and self.wants(len(blob) // self._posting_bytes):
            self._blocks[key] = blob
            POSTINGS_CACHE_BYTES.set(self.bytes_held)

    @property
    def bytes_held(self) -> int:
        return int(self._blocks.currsize)

    def __len__(self) -> int:
        return len(self._blocks)
