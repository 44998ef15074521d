"""The bulk postings build's host side: the binary COPY rows it reads, and the block encoder it writes with."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from services.retriever.engine import bulk_postings
from services.retriever.engine.lexical.blocks import POSTING, encode_blocks, pack_postings


def _stream(rows: list[tuple[int, ...]]) -> bytes:
    """A binary COPY stream as PostgreSQL writes it: header, rows of int4 fields, trailer."""
    out = bytearray(b"PGCOPY\n\xff\r\n\x00" + struct.pack(">ii", 0, 0))
    for row in rows:
        out += struct.pack(">h", len(row))
        for value in row:
            out += struct.pack(">ii", 4, value)
    return bytes(out + struct.pack(">h", -1))


async def _feed(stream: bytes, cuts: list[int]) -> np.ndarray:
    sink = bulk_postings._CopyRows()
    start = 0
    for cut in [*cuts, len(stream)]:
        await sink(stream[start:cut])
        start = cut
    return sink.rows()


@pytest.mark.parametrize("cuts", [[], [3], [5, 19, 20, 61, 200], list(range(1, 400, 7))])
async def test_copy_rows_reads_every_row_however_the_stream_is_cut(cuts: list[int]) -> None:
    rng = np.random.default_rng(7)
    rows = [tuple(int(v) for v in rng.integers(0, 70_000, size=8)) for _ in range(9)]
    parsed = await _feed(_stream(rows), cuts)
    assert [tuple(int(r[f]) for f in bulk_postings._FIELDS) for r in parsed] == rows


async def test_copy_rows_of_an_empty_result_and_of_a_torn_stream() -> None:
    assert len(await _feed(_stream([]), [])) == 0
    with pytest.raises(ValueError, match="not whole rows"):
        await _feed(_stream([(1,) * 8])[:-5] + b"\xff\xff", [])


def test_pack_postings_caps_each_field_as_the_store_does() -> None:
    tf, short = np.array([3, 900]), np.array([2, 300])
    packed = pack_postings(np.array([5, 9]), tf, tf, tf, np.array([40, 70_000]), short, short)
    assert packed.dtype == POSTING
    assert packed[0].tolist() == (5, 3, 3, 3, 40, 2, 2)
    assert packed[1].tolist() == (9, 255, 255, 255, 65535, 255, 255)


def test_encode_blocks_cuts_each_terms_postings_into_blocks_in_key_order() -> None:
    terms = np.array([4] * 7 + [11] * 2 + [12])
    keys = np.array([1, 2, 3, 5, 8, 13, 21, 2, 9, 6])
    tf, one = np.arange(10) % 4, np.ones(10, int)
    postings = pack_postings(keys, tf, tf, tf, np.arange(10) * 10, one, one)
    rows = encode_blocks(terms, postings, block_postings=3)
    assert [(t, b.n, b.min_key, b.max_key) for t, b in rows] == [
        (4, 3, 1, 3),
        (4, 3, 5, 13),
        (4, 1, 21, 21),
        (11, 2, 2, 9),
        (12, 1, 6, 6),
    ]
    assert b"".join(b.postings for _, b in rows) == postings.tobytes()  # every posting, once, as packed
    assert [b.bounds.max_tf_text for _, b in rows] == [2, 3, 2, 3, 1]  # each block's own largest frequency
    assert [b.bounds.min_len_text for _, b in rows] == [0, 30, 60, 70, 90]
    assert encode_blocks(np.empty(0, int), postings[:0]) == []
