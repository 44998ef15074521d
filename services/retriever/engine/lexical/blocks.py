"""The packed posting format of the lexical index's blocks (``bm25_blocks``) and their score bounds: what the
store's triggers and the compaction write and the lexical leg and its cache read.

A block carries, beside its postings, the largest term frequency and the smallest length of each field over
its postings (:class:`BlockBounds`). A posting's BM25F contribution grows with its weighted term frequency and
shrinks with its weighted length, so these six numbers bound every posting of the block for any ``k1``, ``b``,
field weights and mean length chosen at query time (:func:`~services.retriever.engine.lexical.postings.
block_upper_bounds`): a bound stored as a score would go stale as the mean length drifts with every write, and
would tie the stored index to one set of parameters."""

from __future__ import annotations

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
