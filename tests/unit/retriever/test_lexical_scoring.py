"""The lexical index's scoring and compaction plan, without a database: BM25F over packed postings, the
order best chunks are resolved in, and the size-tiered merge."""

from __future__ import annotations

import math

import numpy as np
import pytest

from services.retriever.lexical_store import (
    POSTING,
    Bm25Scoring,
    CorpusCounts,
    TermPostings,
    best_keys,
    bm25_scores,
    merge_plan,
)


def _postings(*rows: tuple[int, int, int, int, int, int, int]) -> np.ndarray:
    return np.array(list(rows), dtype=POSTING)


SCORING = Bm25Scoring(k1=0.9, b=0.4, title_weight=2.0, section_weight=0.5, counts=CorpusCounts(10, 4.0, 2.0, 20.0))


def _by_hand(tf: float, dl: float, df: int, s: Bm25Scoring = SCORING) -> float:
    avgdl = 20.0 + 2.0 * 4.0 + 0.5 * 2.0
    idf = math.log(1 + (10 - df + 0.5) / (df + 0.5))
    return idf * tf * (s.k1 + 1) / (tf + s.k1 * (1 - s.b + s.b * dl / avgdl))


def test_packed_postings_are_eleven_big_endian_bytes() -> None:
    raw = bytes.fromhex("00010007" + "02" + "01" + "00" + "ff14" + "03" + "01")
    p = np.frombuffer(raw, dtype=POSTING)
    assert POSTING.itemsize == 11
    fields = (int(p["key"][0]), int(p["tf_text"][0]), int(p["len_text"][0]), int(p["len_title"][0]))
    assert fields == (65543, 2, 65300, 3)


def test_scores_are_bm25f_summed_per_chunk() -> None:
    # term a in chunks 1 and 3, term b in chunk 3; fields: text tf, title tf, section tf, lengths.
    a = TermPostings(2, _postings((1, 2, 1, 0, 20, 4, 2), (3, 1, 0, 0, 30, 5, 0)))
    b = TermPostings(5, _postings((3, 0, 0, 2, 30, 5, 0)))
    scores = bm25_scores([a, b], SCORING, np.array([], dtype=np.int64))
    assert scores[1] == pytest.approx(_by_hand(2 + 2.0 * 1, 20 + 2.0 * 4 + 0.5 * 2, 2))
    assert scores[3] == pytest.approx(_by_hand(1, 30 + 2.0 * 5, 2) + _by_hand(0.5 * 2, 30 + 2.0 * 5, 5))
    assert scores[0] == scores[2] == 0.0


def test_a_posting_without_weighted_occurrences_and_dead_chunks_score_nothing() -> None:
    t = TermPostings(1, _postings((2, 0, 0, 3, 10, 1, 3), (4, 1, 0, 0, 10, 1, 0), (5, 2, 0, 0, 10, 1, 0)))
    no_section = Bm25Scoring(0.9, 0.4, 1.0, 0.0, CorpusCounts(10, 4.0, 2.0, 20.0))
    scores = bm25_scores([t], no_section, np.array([5], dtype=np.int64))
    assert scores[2] == 0.0  # only section occurrences, weighted 0
    assert scores[4] > 0
    assert scores[5] == 0.0  # removed chunk, postings not yet compacted away


def test_best_keys_orders_by_score_then_key_and_never_splits_a_tie() -> None:
    scores = np.array([0.0, 3.0, 1.0, 3.0, 2.0, 1.0, 1.0, 0.0])
    assert best_keys(scores, 100).tolist() == [1, 3, 4, 2, 5, 6]
    assert best_keys(scores, 2).tolist() == [1, 3]
    # the 4th place ties with two more: all three come, so the caller decides among them
    assert best_keys(scores, 4).tolist() == [1, 3, 4, 2, 5, 6]
    # a prefix of a longer call is the shorter call: passes of growing size continue one order
    assert best_keys(scores, 3).tolist() == best_keys(scores, 100).tolist()[:3]


def test_merge_plan_is_size_tiered() -> None:
    assert merge_plan([5], 100) == []  # one block: nothing to merge
    assert merge_plan([100, 100, 3], 100) == []  # full blocks stay; a lone small one waits
    assert sorted(merge_plan([1, 1, 2, 3], 100)) == [0, 1, 2, 3]
    # a big open block is rewritten only once the small ones together reach half its size
    assert sorted(merge_plan([60, 1, 2, 3], 100)) == [1, 2, 3]
    assert sorted(merge_plan([60, 10, 10, 10], 100)) == [0, 1, 2, 3]


def test_a_posting_is_rewritten_about_log2_cap_times_under_steady_appends() -> None:
    cap = 1024
    blocks: list[int] = []
    written = 0
    for _ in range(5000):  # one posting a write, a compaction after each
        blocks.append(1)
        plan = merge_plan(blocks, cap)
        if plan:
            total = sum(blocks[i] for i in plan)
            written += total
            blocks = [n for i, n in enumerate(blocks) if i not in set(plan)]
            blocks += [cap] * (total // cap) + ([total % cap] if total % cap else [])
    assert written / 5000 <= math.log2(cap) + 2
    assert sum(1 for n in blocks if n < cap) <= math.log2(cap) + 1


def test_k1_zero_scores_presence_only() -> None:
    t = TermPostings(2, _postings((1, 3, 0, 0, 20, 4, 2), (2, 0, 0, 1, 20, 4, 2)))
    binary = Bm25Scoring(0.0, 0.4, 1.0, 0.0, CorpusCounts(10, 4.0, 2.0, 20.0))
    scores = bm25_scores([t], binary, np.array([], dtype=np.int64))
    assert scores[1] == pytest.approx(math.log(1 + (10 - 2 + 0.5) / 2.5))  # idf, whatever the frequency
    assert scores[2] == 0.0 and not np.isnan(scores).any()  # only a section occurrence, weighted 0
