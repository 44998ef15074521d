"""The packed posting format of the lexical index's blocks (``bm25_blocks``): what the store's triggers write and
the lexical leg and its cache read."""

from __future__ import annotations

import itertools

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

#: One ``bm25_blocks`` row as written: term id, posting count, the first and last chunk key, the packed postings.
BlockRow = tuple[int, int, int, int, bytes]


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


def encode_blocks(term_ids: np.ndarray, postings: np.ndarray, block_postings: int = BLOCK_POSTINGS) -> list[BlockRow]:
    """The ``bm25_blocks`` rows of ``postings`` (of :data:`POSTING`, sorted by term then chunk key; ``term_ids``
    the term of each): each term's postings cut into blocks of ``block_postings``, the last one smaller."""
    rows: list[BlockRow] = []
    if not len(postings):
        return rows
    starts = np.flatnonzero(np.diff(term_ids)) + 1
    bounds = np.concatenate(([0], starts, [len(postings)])).tolist()
    keys = postings["key"]
    for s, e in itertools.pairwise(bounds):
        term = int(term_ids[s])
        for i in range(s, e, block_postings):
            j = min(i + block_postings, e)
            rows.append((term, j - i, int(keys[i]), int(keys[j - 1]), postings[i:j].tobytes()))
    return rows
