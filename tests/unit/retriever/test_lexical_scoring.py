"""The lexical index's scoring and compaction plan, without a database: BM25F over packed postings, the
order best chunks are resolved in, and the size-tiered merge."""

from __future__ import annotations

import math

import numpy as np
import pytest

from services.retriever.engine.lexical.blocks import POSTING
from services.retriever.engine.lexical.compaction import merge_plan
from services.retriever.engine.lexical.postings import (
    Bm25Scoring,
    CorpusCounts,
    QueryPostings,
    TermPostings,
    _joined,
    best_keys,
    bm25_scores,
)
from services.retriever.engine.lexical.rank import FIRST_PASS_MAX_GROWTH, PASS_GROWTH, PASS_MARGIN, next_pass


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
    scores = bm25_scores(QueryPostings.of([a, b]), SCORING, np.array([], dtype=np.int64))
    assert scores[1] == pytest.approx(_by_hand(2 + 2.0 * 1, 20 + 2.0 * 4 + 0.5 * 2, 2))
    assert scores[3] == pytest.approx(_by_hand(1, 30 + 2.0 * 5, 2) + _by_hand(0.5 * 2, 30 + 2.0 * 5, 5))
    assert scores[0] == scores[2] == 0.0


def test_a_posting_without_weighted_occurrences_and_dead_chunks_score_nothing() -> None:
    t = TermPostings(1, _postings((2, 0, 0, 3, 10, 1, 3), (4, 1, 0, 0, 10, 1, 0), (5, 2, 0, 0, 10, 1, 0)))
    no_section = Bm25Scoring(0.9, 0.4, 1.0, 0.0, CorpusCounts(10, 4.0, 2.0, 20.0))
    scores = bm25_scores(QueryPostings.of([t]), no_section, np.array([5], dtype=np.int64))
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


def test_best_keys_on_large_arrays_is_a_plain_sort() -> None:
    """Over arrays large enough for the sampled floor (sorted or shuffled scores, few distinct values or many,
    a few best scores exactly where the sample looks, most scores 0 or some), the answer is that of sorting every
    positive score."""
    rng = np.random.default_rng(7)
    for trial in range(120):
        n = int(rng.integers(2_000, 60_000))
        scores = rng.random(n) * 40
        if trial % 3 == 1:
            scores = np.round(scores)  # many ties
        if trial % 3 == 2:
            scores = np.sort(scores)  # the best all at one end, between the sample's points
        scores[rng.random(n) < (0.3 if trial % 4 else 0.97)] = 0.0  # (mostly zeros: the sample's floor is 0)
        count = int(rng.choice([1, 5, 20, 64, 256]))
        if trial % 5 == 4 and n // (16 * count) >= 4:
            scores[: 3 * (n // (16 * count)) : n // (16 * count)] = 100.0  # the sample's best: fewer than count
        positive = np.flatnonzero(scores > 0)
        ranked = positive[np.lexsort((positive, -scores[positive]))]
        floor = scores[ranked[min(count, len(ranked)) - 1]]  # (fewer positive than count: all of them)
        assert best_keys(scores, count).tolist() == ranked[scores[ranked] >= floor].tolist(), trial


def test_merge_plan_is_size_tiered() -> None:
    assert merge_plan([5], 100) == []  # one block: nothing to merge
    assert merge_plan([100, 100, 3], 100) == []  # full blocks stay; a lone small one waits
    assert sorted(merge_plan([1, 1, 2, 3], 100)) == [0, 1, 2, 3]
    # a big open block is rewritten only once the small ones together reach half its size
    assert sorted(merge_plan([60, 1, 2, 3], 100)) == [1, 2, 3]
    assert sorted(merge_plan([60, 10, 10, 10], 100)) == [0, 1, 2, 3]
    # a block too small for the next to join it waits alone; the others still merge
    assert sorted(merge_plan([3, 30, 30, 30], 100)) == [1, 2, 3]
    assert merge_plan([3, 30, 100], 100) == []


def test_a_small_remnant_does_not_keep_later_blocks_from_merging() -> None:
    # A block of 3 postings left by a rewrite, then writes of 100 postings each, a compaction after each: the
    # term's small blocks stay few (started only from the smallest, the plan merged none of them, ever).
    cap = 8192
    blocks = [3]
    for _ in range(500):
        blocks.append(100)
        plan = merge_plan(blocks, cap)
        if plan:
            total = sum(blocks[i] for i in plan)
            blocks = [n for i, n in enumerate(blocks) if i not in set(plan)]
            blocks += [cap] * (total // cap) + ([total % cap] if total % cap else [])
    assert sum(1 for n in blocks if n < cap) <= math.log2(cap) + 1
    assert sum(blocks) == 3 + 500 * 100


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
    scores = bm25_scores(QueryPostings.of([t]), binary, np.array([], dtype=np.int64))
    assert scores[1] == pytest.approx(math.log(1 + (10 - 2 + 0.5) / 2.5))  # idf, whatever the frequency
    assert scores[2] == 0.0 and not np.isnan(scores).any()  # only a section occurrence, weighted 0


def test_scores_match_bm25f_computed_posting_by_posting_in_double_precision() -> None:
    # Many terms over overlapping chunks, every field used: the one-pass single-precision scoring agrees with
    # the formula applied posting by posting (to 1e-6 relative), and chunks with equal postings tie exactly.
    rng = np.random.default_rng(7)
    terms = []
    for df in (400, 120, 35, 3):
        p = np.zeros(df, dtype=POSTING)
        p["key"] = np.sort(rng.choice(500, df, replace=False))
        for field, high in (("tf_text", 6), ("tf_title", 3), ("tf_section", 2), ("len_title", 20), ("len_section", 9)):
            p[field] = rng.integers(0, high, df)
        p["len_text"] = rng.integers(1, 3000, df)
        terms.append(TermPostings(df, p))
    twin = terms[0].postings[0].copy()  # chunk 600: the same single posting as the first of term 0
    twin["key"] = 600
    terms.append(TermPostings(terms[0].df, np.array([twin], dtype=POSTING)))
    scoring = Bm25Scoring(1.2, 0.75, 1.7, 0.3, CorpusCounts(1000, 6.0, 3.0, 400.0))
    expected = np.zeros(601)
    for t in terms:
        for row in t.postings:
            tf = int(row["tf_text"]) + 1.7 * int(row["tf_title"]) + 0.3 * int(row["tf_section"])
            dl = int(row["len_text"]) + 1.7 * int(row["len_title"]) + 0.3 * int(row["len_section"])
            if tf > 0:
                norm = scoring.k1 * (1 - scoring.b + scoring.b * dl / scoring.avgdl)
                expected[int(row["key"])] += scoring.idf(t.df) * tf * (scoring.k1 + 1) / (tf + norm)
    scores = bm25_scores(QueryPostings.of(terms), scoring, np.array([], dtype=np.int64))
    assert len(scores) == 601
    np.testing.assert_allclose(scores, expected, rtol=1e-6, atol=0)
    first = int(terms[0].postings[0]["key"])
    alone = bm25_scores(
        QueryPostings.of([TermPostings(terms[0].df, terms[0].postings[:1])]), scoring, np.array([], dtype=np.int64)
    )
    assert scores[600] == alone[first] > 0


def test_blocks_listed_in_any_order_are_grouped_by_term() -> None:
    # Rows of a term's blocks may come interleaved with other terms' (no ORDER BY): each term's postings are
    # weighted by its own df however the rows arrived.
    a1, a2 = _postings((1, 1, 0, 0, 20, 4, 0)), _postings((3, 1, 0, 0, 20, 4, 0), (4, 2, 0, 0, 20, 4, 0))
    b1 = _postings((2, 1, 0, 0, 20, 4, 0))
    q = _joined([7, 5, 7], [2, 9, 2], [a1.tobytes(), b1.tobytes(), a2.tobytes()])
    assert q.df == (9, 2) and q.counts == (1, 3)
    scores = bm25_scores(q, SCORING, np.array([], dtype=np.int64))
    expected = bm25_scores(
        QueryPostings.of(
            [TermPostings(9, b1), TermPostings(2, np.frombuffer(a1.tobytes() + a2.tobytes(), dtype=POSTING))]
        ),
        SCORING,
        np.array([], dtype=np.int64),
    )
    np.testing.assert_array_equal(scores, expected)
    assert scores[2] < scores[1]  # term 5 (df 9) weighs less than term 7 (df 2) for the same tf and length
    assert len(_joined([], [], []).postings) == 0


def test_the_first_filter_pass_is_sized_by_the_planners_share() -> None:
    assert next_pass(100, 0, 0) == 256  # no estimate: the least pass
    assert next_pass(300, 0, 0) == 600
    # A filter expected to pass 20 % of the chunks: 20 / 0.2 candidates and a margin would do; at least 256.
    assert next_pass(20, 0, 0, share=0.2) == 256
    # Expected to pass 5 %: k / 0.05 candidates and a margin, in one pass.
    assert next_pass(20, 0, 0, share=0.05) == math.ceil(20 / 0.05 * PASS_MARGIN)
    assert next_pass(100, 0, 0, share=3.0) == 256  # a share over 1 (an estimate off) counts as 1
    # The planner's share never makes the first pass more than FIRST_PASS_MAX_GROWTH times the plain one: an
    # estimate far too low (MeSH overlaps are guesses) must not read thousands where 256 would do.
    assert next_pass(100, 0, 0, share=0.05) == FIRST_PASS_MAX_GROWTH * 256
    assert next_pass(100, 0, 0, share=1e-6) == FIRST_PASS_MAX_GROWTH * 256


def test_when_few_candidates_fail_the_first_pass_is_k_and_the_margin() -> None:
    # The default filters alone (or the doc values dropped every chunk certain to fail): not 256 for 20 wanted.
    assert next_pass(20, 0, 0, few_fail=True) == math.ceil(20 * PASS_MARGIN) == 25
    assert next_pass(20, 0, 0, share=0.01, few_fail=True) == 25  # (the planner's share is not asked then)
    assert next_pass(1_000, 0, 0, few_fail=True) == 1_250
    # Some of them failed after all: the next pass follows the rate seen, as for any filter.
    assert next_pass(20, 17, 25, few_fail=True) == next_pass(20, 17, 25) == 25 + 256


def test_later_passes_follow_the_rate_seen_so_far() -> None:
    # 14 of the first 256 passed (5.5 %): the 86 missing need ~1,570 more, with the margin ~1,970.
    assert next_pass(100, 14, 256) == 256 + math.ceil(86 * 256 / 14 * PASS_MARGIN)
    # One missing after 2,000: a short pass, not another multiple of what was read.
    assert next_pass(100, 99, 2_000) == 2_000 + 256
    # Nothing passed yet: no rate, the read grows by PASS_GROWTH.
    assert next_pass(100, 0, 256) == 256 * PASS_GROWTH
    for k, found, resolved in [(100, 1, 256), (20, 3, 448), (1_000, 999, 50_000)]:
        assert next_pass(k, found, resolved) > resolved  # every pass reads new candidates
