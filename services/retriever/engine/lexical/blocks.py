"""The packed posting format of the lexical index's blocks (``bm25_blocks``) and their score bounds: what the
store's triggers and the compaction write and the lexical leg and its cache read.

A block carries, beside its postings, the largest term frequency and the smallest length of each field over
its postings (:class:`BlockBounds`). A posting's BM25F contribution grows with its weighted term frequency and
shrinks with its weighted length, so these six numbers bound every posting of the block for any ``k1``, ``b``,
field weights and mean length chosen at query time (:func:`~services.retriever.engine.lexical.postings.
block_upper_bounds`): a bound stored as a score would go stale as the mean length drifts with every write, and
would tie the stored index to one set of parameters."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass

import numpy as np

#: One posting as the store packs it (``bm25_add`` in the store's migrations): 11 bytes, big-endian; the one-byte
#: fields are capped at 255, ``len_text`` at 65535.
POSTING = np.dtype(
    [
        ("key", ">i4"),
        ("tf_text", "u1"),
        ("tf_title", "u1"),
        ("tf_section", "u1"),
        ("len_text", ">u2"),
        ("len_title", "u1"),
        ("len_section", "u1"),
    ]
)

#: Postings a block holds at most: the compaction merges smaller blocks up to this size, and a bulk build writes
#: blocks of this size (and one smaller last block a term).
BLOCK_POSTINGS = 8192


def pack_postings(
    keys: np.ndarray,
    tf_text: np.ndarray,
    tf_title: np.ndarray,
    tf_section: np.ndarray,
    len_text: np.ndarray,
    len_title: np.ndarray,
    len_section: np.ndarray,
) -> np.ndarray:
    """Postings in the stored format (:data:`POSTING`), each field capped as the store's triggers cap it."""
    out = np.empty(len(keys), dtype=POSTING)
    out["key"] = keys
    for name, values in (
        ("tf_text", tf_text),
        ("tf_title", tf_title),
        ("tf_section", tf_section),
        ("len_title", len_title),
        ("len_section", len_section),
    ):
        out[name] = np.minimum(values, 255)
    out["len_text"] = np.minimum(len_text, 65535)
    return out


#: A block's identity: its id and the row version that wrote it (``xmin``). A block is **immutable**
#: (``bm25_blocks``: compaction writes merged postings as new blocks and deletes the old ones; nothing updates a
#: block in place), so the pair names one content for good, even in a database whose identity sequence was reset.
BlockKey = tuple[int, str]


def located(sorted_keys: np.ndarray, needles: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Where each of ``needles`` is in ``sorted_keys`` (ascending, distinct): a position (clipped into the array)
    and whether the key is there."""
    if not len(sorted_keys):
        return np.zeros(len(needles), dtype=np.intp), np.zeros(len(needles), dtype=bool)
    at = np.searchsorted(sorted_keys, needles)
    np.minimum(at, len(sorted_keys) - 1, out=at)
    return at, sorted_keys[at] == needles


#: A view's keys may get a :class:`KeyIndex` (:meth:`TermView.allow_index`) where the index takes at most this
#: share of what the view holds without it: a common term's (at 3x10^6 chunks a term in 1 in 25 chunks or more;
#: the index of a term in every third chunk ~3 % of its view). Memory only, never a result.
KEY_INDEX_SHARE = 0.25

#: An allowed index is built by the first lookup of at least this many keys (a pruned search's remaining chunks,
#: tens of thousands), not by the threshold's few hundred, which a binary search finds in well under the ~3.5 ms
#: an index of a term of 10^6 postings takes to build (``bench/key_index.py``): a long query's probe touches
#: a hundred common terms, which a cache churned by such queries would index each time. Time only.
INDEX_FROM_KEYS = 4096


class KeyIndex:
    """Which of a key space's keys a sorted key array holds, and at which position, in a few array operations a
    key whatever the array's length: a bitmap of the keys (a bit a key, up to the largest) and the number of keys
    before each of its 64-bit words (a rank directory). A pruned search looks tens of thousands of chunks up in a
    common term of a million postings; a binary search of each costs ~20 dependent reads, this a few gathers
    (``bench/key_index.py``, the 2-core machine: 30,000 keys in a term of 10^6 of 3x10^6, 1.3 ms searched, 0.39
    ms indexed). Numpy offers no such structure (``searchsorted`` is the binary search), and the 20 lines are
    cheaper than a dependency (a roaring bitmap library ranks one key a call)."""

    __slots__ = ("ranks", "words")

    def __init__(self, keys: np.ndarray) -> None:
        """The index of ``keys`` (ascending, distinct, none negative; at least one)."""
        words = int(keys[-1]) // 64 + 1
        bits = np.zeros(words * 64, dtype=bool)
        bits[keys] = True
        self.words: np.ndarray = np.packbits(bits, bitorder="little").view("<u8")
        counts = np.bitwise_count(self.words)
        self.ranks: np.ndarray = np.zeros(words, dtype=np.int32)
        np.cumsum(counts[:-1], out=self.ranks[1:])

    @staticmethod
    def bytes_for(keys: np.ndarray) -> int:
        """What the index of ``keys`` (as for the constructor) takes: 12 bytes for every 64 keys of its space."""
        return (int(keys[-1]) // 64 + 1) * 12 if len(keys) else 0

    @property
    def held_bytes(self) -> int:
        return int(self.words.nbytes + self.ranks.nbytes)

    def lookup(self, needles: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Which of ``needles`` (none negative) the indexed keys hold (a mask over them) and, for those, their
        positions in the keys, in ``needles`` order: what :func:`located` finds, without the binary search."""
        held = np.zeros(len(needles), dtype=bool)
        inside = np.flatnonzero(needles < len(self.words) * 64)  # (beyond the largest key: none held)
        word_at = needles[inside] >> 6
        words = self.words[word_at]
        bits = (needles[inside] & 63).astype(np.uint64)
        there = ((words >> bits) & np.uint64(1)).astype(bool)
        held[inside[there]] = True
        words, bits, word_at = words[there], bits[there], word_at[there]
        below = words & ((np.uint64(1) << bits) - np.uint64(1))  # (bit 0: none below)
        found: np.ndarray = self.ranks[word_at].astype(np.intp) + np.bitwise_count(below)
        return held, found


class TermView:
    """One term's postings held in memory: those of the blocks ``blocks`` (all of the term's, or the ones a search
    asked for), in chunk-key order, as packed records (:attr:`packed`) with their keys decoded (:attr:`keys`,
    native ``int32``), and their BM25F saturation for the scoring last asked for (:meth:`saturation`).

    A term's chunks are each in one of its blocks, once, so key order changes no chunk's sum. A search finds the
    chunks it still needs in a common term with one binary search of :attr:`keys`, and scores postings by
    multiplying the held saturations by the term's weight: the retriever's cache
    (:class:`~services.retriever.engine.lexical.postings_cache.PostingsCache`) keeps common terms' views, so
    neither the decoding nor the saturation is redone by each search."""

    __slots__ = ("_index", "_index_from", "_saturation", "blocks", "keys", "packed")

    def __init__(self, blocks: frozenset[BlockKey], packed: np.ndarray) -> None:
        keys = packed["key"].astype(np.int32)
        if len(keys) > 1 and bool((keys[1:] < keys[:-1]).any()):  # blocks out of key order, or overlapping
            order = np.argsort(keys, kind="stable")  # (runs already sorted: a merge, not a full sort)
            keys, packed = keys[order], np.take(packed, order)  # (indexing records is ~15x slower than take)
        self.blocks = blocks
        self.keys = keys
        self.packed = packed
        self._saturation: tuple[Hashable, np.ndarray] | None = None
        self._index: KeyIndex | None = None
        self._index_from: int | None = None  # (None: not to be indexed)

    @classmethod
    def of(cls, blocks: Mapping[BlockKey, bytes]) -> TermView:
        """A view of the packed blocks ``blocks`` (of one term; given in key order, the usual case of blocks whose
        ranges do not overlap, they are joined without sorting)."""
        return cls(frozenset(blocks), np.frombuffer(b"".join(blocks.values()), dtype=POSTING))

    def merged(self, other: TermView) -> TermView:
        """This view and ``other`` (other blocks of the same term) as one."""
        return TermView(self.blocks | other.blocks, np.concatenate((self.packed, other.packed)))

    def saturation(self, signature: Hashable, compute: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
        """``compute(self.packed)``, kept for the next call with the same ``signature`` (the scoring parameters
        and corpus counts it depends on): computed again only when they change."""
        if self._saturation is None or self._saturation[0] != signature:
            self._saturation = (signature, compute(self.packed))
        return self._saturation[1]

    def allow_index(self, share: float = KEY_INDEX_SHARE, from_keys: int = INDEX_FROM_KEYS) -> bool:
        """Let this view's keys be indexed (:class:`KeyIndex`, built by the first lookup of at least ``from_keys``
        keys, default :data:`INDEX_FROM_KEYS`) if the index takes at most ``share`` (default
        :data:`KEY_INDEX_SHARE`) of what the view holds without it: a view held for many searches (the retriever's
        cache allows it before keeping it, the index charged from then on). Whether it is allowed."""
        if len(self.keys) and KeyIndex.bytes_for(self.keys) <= share * len(self) * (POSTING.itemsize + 8):
            self._index_from = from_keys
        return self.indexed

    @property
    def indexed(self) -> bool:
        """Whether the view's keys are indexed or may be (:meth:`lookup` of many keys then costs the same a key at
        any length)."""
        return self._index_from is not None

    @property
    def index_built(self) -> bool:
        """Whether the view's :class:`KeyIndex` is built (by a lookup of enough keys, once allowed)."""
        return self._index is not None

    def index_for(self, count: int) -> None:
        """Build the :class:`KeyIndex` now if a lookup of ``count`` keys would (before lookups of parts of them
        run on several threads, which then only read the view)."""
        if self._index is None and self._index_from is not None and count >= self._index_from and len(self.keys):
            self._index = KeyIndex(self.keys)

    def lookup(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Which of ``keys`` (sorted, none negative) this view holds (a mask over them) and their positions in
        :attr:`keys`, in order: by its :class:`KeyIndex` where it has one (or may, and ``keys`` are many: it is
        built first), else by binary search."""
        if not len(self.keys) or not len(keys):
            return np.zeros(len(keys), dtype=bool), np.zeros(0, dtype=np.intp)
        self.index_for(len(keys))
        if self._index is not None:
            return self._index.lookup(keys)
        needles = keys.astype(self.keys.dtype, copy=False)  # (mixed types would copy the view's keys each time)
        at, held = located(self.keys, needles)
        return held, at[held]

    @property
    def held_bytes(self) -> int:
        """What the view takes in memory with a saturation held: 11 packed bytes, a 4-byte key and a 4-byte
        saturation a posting, and its key index if it may have one (built or not: what the cache charges does not
        change while it holds the view)."""
        return len(self) * (POSTING.itemsize + 8) + (KeyIndex.bytes_for(self.keys) if self.indexed else 0)

    def __len__(self) -> int:
        return len(self.keys)


#: The bound columns of ``bm25_blocks``, in :class:`BlockBounds` order (migration ``260_bm25_block_bounds.sql``).
BOUND_COLUMNS = ("max_tf_text", "max_tf_title", "max_tf_section", "min_len_text", "min_len_title", "min_len_section")


@dataclass(frozen=True)
class BlockBounds:
    """The largest term frequency and the smallest length of each field over a block's postings: no posting
    of the block scores more than one with these frequencies and lengths would."""

    max_tf_text: int
    max_tf_title: int
    max_tf_section: int
    min_len_text: int
    min_len_title: int
    min_len_section: int

    @classmethod
    def of(cls, postings: np.ndarray) -> BlockBounds:
        """The bounds of ``postings`` (of :data:`POSTING`, at least one)."""
        return cls(
            int(postings["tf_text"].max()),
            int(postings["tf_title"].max()),
            int(postings["tf_section"].max()),
            int(postings["len_text"].min()),
            int(postings["len_title"].min()),
            int(postings["len_section"].min()),
        )

    def as_tuple(self) -> tuple[int, int, int, int, int, int]:
        """The bounds in :data:`BOUND_COLUMNS` order."""
        return (
            self.max_tf_text,
            self.max_tf_title,
            self.max_tf_section,
            self.min_len_text,
            self.min_len_title,
            self.min_len_section,
        )


@dataclass(frozen=True)
class EncodedBlock:
    """A block as ``bm25_blocks`` stores it: its posting count, key range, bounds and packed postings."""

    n: int
    min_key: int
    max_key: int
    bounds: BlockBounds
    postings: bytes


def encode_block(postings: np.ndarray) -> EncodedBlock:
    """The stored form of ``postings`` (of :data:`POSTING`, at least one, in key order): the one encoder of the
    blocks written outside the insert trigger (compaction, bulk builds); the trigger's SQL (``bm25_add``)
    computes the same columns."""
    keys = postings["key"]
    return EncodedBlock(len(postings), int(keys[0]), int(keys[-1]), BlockBounds.of(postings), postings.tobytes())


#: The columns of a ``bm25_blocks`` row as :func:`block_row` gives them (COPY and inserts).
BLOCK_COLUMNS = ("term_id", "n", "min_key", "max_key", *BOUND_COLUMNS, "postings")


def encode_blocks(
    term_ids: np.ndarray, postings: np.ndarray, block_postings: int = BLOCK_POSTINGS
) -> list[tuple[int, EncodedBlock]]:
    """The blocks of ``postings`` (of :data:`POSTING`, sorted by term then chunk key; ``term_ids`` the term of
    each), each with its term: each term's postings cut into blocks of ``block_postings``, the last one smaller."""
    blocks: list[tuple[int, EncodedBlock]] = []
    if not len(postings):
        return blocks
    starts = np.flatnonzero(np.diff(term_ids)) + 1
    bounds = np.concatenate(([0], starts, [len(postings)])).tolist()
    for s, e in itertools.pairwise(bounds):
        term = int(term_ids[s])
        for i in range(s, e, block_postings):
            blocks.append((term, encode_block(postings[i : min(i + block_postings, e)])))
    return blocks


def block_row(term: int, block: EncodedBlock) -> tuple[int | bytes, ...]:
    """``block`` of ``term`` as a ``bm25_blocks`` row in :data:`BLOCK_COLUMNS` order."""
    return (term, block.n, block.min_key, block.max_key, *block.bounds.as_tuple(), block.postings)
