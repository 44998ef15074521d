"""Pruned lexical scoring (MaxScore with block bounds) against the exhaustive pass: on random corpora, queries,
filters, k, removals and rewritten blocks, the k best passing chunks and their scores are the same."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.retriever.engine.lexical import postings, pruning
from services.retriever.engine.lexical.blocks import POSTING, BlockBounds, KeyIndex, TermView, encode_block, located
from services.retriever.engine.lexical.postings import (
    BlockRef,
    Bm25Scoring,
    CorpusCounts,
    QueryPostings,
    TermPostings,
    block_upper_bounds,
    bm25_scores,
    by_term_id,
    posting_impacts,
    term_weight,
    view_scores,
)
from services.retriever.engine.lexical.pruning import BlockVanished, _covering_bound, _Sums, _Term, pruned_scores

FIELDS = [f for f in POSTING.names or () if f != "key"]


@dataclass
class Corpus:
    """A query's terms as blocks (with their stored bounds), the corpus counts and the removed keys."""

    refs: list[BlockRef]
    blobs: dict[int, bytes]
    scoring: Bm25Scoring
    dead: np.ndarray
    chunks: int


def _corpus(rng: np.random.Generator) -> Corpus:
    chunks = int(rng.integers(20, 3000))
    len_text = rng.integers(1, 400, chunks)
    len_title = rng.integers(0, 30, chunks)
    len_section = rng.integers(0, 6, chunks)
    terms = int(rng.integers(1, 30))
    refs: list[BlockRef] = []
    blobs: dict[int, bytes] = {}
    block_id = 0
    for term_id in rng.permutation(1000)[:terms]:
        # Document frequencies from a handful of chunks to nearly all of them (rare and common terms).
        if rng.random() < 0.5:
            df = int(min(chunks, max(1, rng.pareto(0.6) * 3)))
        else:
            df = max(1, int(chunks * rng.uniform(0.02, 0.6)))
        keys = np.sort(rng.choice(chunks, df, replace=False))
        p = np.zeros(df, dtype=POSTING)
        p["key"] = keys
        p["tf_text"] = np.minimum(rng.geometric(0.5, df) - (rng.random(df) < 0.2), len_text[keys])
        p["tf_title"] = np.minimum(rng.geometric(0.7, df) - 1, len_title[keys])
        p["tf_section"] = np.minimum(rng.geometric(0.8, df) - 1, len_section[keys])
        p["len_text"], p["len_title"], p["len_section"] = len_text[keys], len_title[keys], len_section[keys]
        # Blocks as writes and compaction leave them: appended runs of any size, some merged (re-split, so key
        # ranges may overlap other blocks), some written before blocks had bounds, some thinned by a removal
        # compaction did not rewrite (bounds left loose).
        cuts = np.sort(rng.choice(np.arange(1, df), min(df - 1, int(rng.integers(0, 8))), replace=False))
        parts = np.split(p[rng.permutation(df)] if rng.random() < 0.3 else p, cuts)
        for part in parts:
            part = part[np.argsort(part["key"], kind="stable")]
            block = encode_block(part)
            bounds = None if rng.random() < 0.01 else block.bounds.as_tuple()
            if rng.random() < 0.2 and len(part) > 1:
                part = part[rng.random(len(part)) < 0.7] if (rng.random(len(part)) < 0.7).any() else part[:1]
            block_id += 1
            blobs[block_id] = part.tobytes()
            refs.append(BlockRef(int(term_id), df, block_id, len(part), block.min_key, block.max_key, "1", bounds))
    weights = rng.choice([0.0, 0.5, 1.0, 2.0], 2)
    counts = CorpusCounts(chunks, float(len_title.mean()), float(len_section.mean()), float(len_text.mean()))
    drift = float(rng.choice([1.0, 0.5, 2.0]))  # the mean length moved since the bounds were stored
    counts = CorpusCounts(chunks, counts.mean_title * drift, counts.mean_section * drift, counts.mean_text * drift)
    k1, b = float(rng.choice([0.0, 0.9, 1.2, 2.0])), float(rng.choice([0.0, 0.4, 0.75, 1.0]))
    scoring = Bm25Scoring(k1, b, float(weights[0]), float(weights[1]), counts)
    dead = np.sort(rng.choice(chunks, int(rng.integers(0, chunks // 10 + 1)), replace=False)).astype(np.int64)
    return Corpus(refs, blobs, scoring, dead, chunks)


def _exhaustive(c: Corpus) -> np.ndarray:
    terms = []
    for term_id in sorted({r.term_id for r in c.refs}):
        mine = [r for r in c.refs if r.term_id == term_id]
        blob = b"".join(c.blobs[r.block_id] for r in mine)
        terms.append(TermPostings(mine[0].df, np.frombuffer(blob, dtype=POSTING)))
    return bm25_scores(QueryPostings.of(terms), c.scoring, c.dead)


def _top(scores: np.ndarray, passing: np.ndarray, k: int) -> list[tuple[int, float]]:
    keys = passing[(passing < len(scores))]
    keys = keys[scores[keys] > 0]
    order = np.lexsort((keys, -scores[keys]))[:k]
    return [(int(keys[i]), float(scores[keys[i]])) for i in order]


#: How the remaining chunks are found in a non-essential term (``lookup_share``): by the cost model, always by
#: binary search, or by search or by a pass of their mask, whichever the counts say.
LOOKUPS: dict[str, int | None] = {"model": None, "always": 0, "mixed": 1}


def _pruned(
    c: Corpus,
    k: int,
    passing: np.ndarray,
    *,
    known: bool,
    seed: float = 0.0,
    lookups: str = "model",
    prune_from: int = 0,
    probe_blocks: int = 256,
    skip_from: float = 0.0,
    dense_share: float | None = None,
    indexed: bool = False,
    essential_max: float = 1.0,
    until_per_key: float = math.inf,
    threads: int = 1,
) -> tuple[np.ndarray, int, int]:
    """``threads`` > 1: the sums and the lookups split across that many threads, however few postings and chunks
    there are."""
    reads: list[int] = []

    async def read(refs: Sequence[BlockRef]) -> dict[int, TermView]:
        reads.extend(r.n for r in refs)
        views = {
            t: TermView.of({(r.block_id, r.version): c.blobs[r.block_id] for r in mine})
            for t, mine in by_term_id(refs).items()
        }
        for view in views.values():
            allowed = view.allow_index(math.inf if indexed else 0.0, from_keys=1)
            assert allowed == (indexed and len(view) > 0)  # (a term whose blocks hold no posting: nothing to index)
        return views

    async def check(keys: np.ndarray, wanted: int) -> np.ndarray:
        # In passes of three, stopping once ``wanted`` pass (the leg's are sized by its pass rate).
        passed: list[np.ndarray] = [np.zeros(0, dtype=np.int64)]
        for start in range(0, len(keys), 3):
            batch = keys[start : start + 3]
            passed.append(batch[np.isin(batch, passing)])
            if sum(map(len, passed)) >= wanted:
                break
        return np.concatenate(passed)

    with pytest.MonkeyPatch.context() as patch:
        if threads > 1:
            for module, name in ((pruning, "SPLIT_FROM_POSTINGS"), (postings, "SPLIT_FROM_POSTINGS")):
                patch.setattr(module, name, 0)
            patch.setattr(pruning, "SPLIT_LOOKUPS_FROM", 0)
        got = asyncio.run(
            pruned_scores(
                c.refs,
                c.scoring,
                c.dead,
                k,
                read,
                passing=passing if known else None,
                check=check,
                probe=8,
                seed_postings=0,
                seed_share=seed,
                prune_from=prune_from,
                lookup_share=LOOKUPS[lookups],
                probe_blocks=probe_blocks,
                skip_from_share=skip_from,
                dense_sums_share=dense_share,
                essential_max_share=essential_max,
                prune_until_per_key=until_per_key,
                threads=threads,
            )
        )
    assert got.postings_read == sum(reads) and got.postings_scored <= got.postings_read
    scores = got.scores.values
    if got.scores.keys is not None:  # the remaining chunks' scores alone: every other key scores 0
        assert got.threshold > 0 and np.all(np.diff(got.scores.keys) > 0)
        scores = np.zeros(c.chunks)
        scores[got.scores.keys] = got.scores.values
    keys = np.arange(c.chunks + 2)
    assert got.scores.at(keys).tobytes() == np.concatenate((scores, np.zeros(c.chunks + 2 - len(scores)))).tobytes()
    return scores, got.postings_read, got.postings_scored


@settings(max_examples=200, deadline=None)
@given(
    st.integers(0, 2**32 - 1),
    st.integers(1, 60),
    st.sampled_from([1.0, 0.5, 0.05, 0.005]),
    st.booleans(),
    st.sampled_from([0.0, 0.1, 0.5]),
    st.sampled_from(sorted(LOOKUPS)),
    st.sampled_from([0, 0, 0, 1000, 10**9]),
    st.sampled_from([256, 256, 3, 0]),
    st.sampled_from([0.0, 0.0, 0.25]),
    st.sampled_from([None, 0.0, 1e9]),
    st.booleans(),
    st.sampled_from([1.0, 1.0, 0.25, 0.0]),
    st.sampled_from([math.inf, math.inf, 4.0, 0.5]),
    st.sampled_from([1, 1, 2, 3]),
)
def test_pruned_top_k_equals_the_exhaustive_top_k(
    seed: int,
    k: int,
    share: float,
    known: bool,
    seed_share: float,
    lookups: str,
    prune_from: int,
    probe: int,
    skip_from: float,
    dense_share: float | None,
    indexed: bool,
    essential_max: float,
    until_per_key: float,
    threads: int,
) -> None:
    """(``probe``: the threshold's chunks looked up in all, some or none of the other terms' blocks;
    ``skip_from``: 0, skip whenever lookups pay, or the default share; ``dense_share``: the partial sums by
    the cost model, always by bincount, always by sorting; ``indexed``: the terms' keys found by their
    :class:`KeyIndex` or by binary search; ``essential_max``: how many postings the essential terms may hold for
    skipping to be tried: any, the default share, none; ``until_per_key``: the postings a key beyond which the
    query is scored whole; ``threads``: the sums and lookups on one thread or split by key range across several.)"""
    rng = np.random.default_rng(seed)
    c = _corpus(rng)
    passing = np.flatnonzero(rng.random(c.chunks) < share)
    expected = _top(_exhaustive(c), passing, k)
    scores, _, _ = _pruned(
        c,
        k,
        passing,
        known=known,
        seed=seed_share,
        lookups=lookups,
        prune_from=prune_from,
        probe_blocks=probe,
        skip_from=skip_from,
        dense_share=dense_share,
        indexed=indexed,
        essential_max=essential_max,
        until_per_key=until_per_key,
        threads=threads,
    )
    assert _top(scores, passing, k) == expected  # same keys, same order, the same bits


def test_random_corpora_do_get_pruned() -> None:
    """The property above is not vacuous: on such corpora, looked up key by key, most searches leave chunks
    unscored and score fewer postings than they read. (With the cost model's estimates, fewer: on corpora of a
    few thousand chunks skipping seldom pays, and the search scores every posting in one pass.)"""
    pruned = looked_up = 0
    for seed in range(60):
        rng = np.random.default_rng(seed)
        c = _corpus(rng)
        passing = np.flatnonzero(rng.random(c.chunks) < 0.5)
        scores, read, scored = _pruned(c, 10, passing, known=bool(seed % 2), lookups="always")
        pruned += (scores > 0).sum() < (_exhaustive(c) > 0).sum()
        looked_up += scored < read
    assert pruned >= 30 and looked_up >= 30


def _postings(keys: np.ndarray, tf: np.ndarray | int, len_text: int = 200) -> np.ndarray:
    p = np.zeros(len(keys), dtype=POSTING)
    p["key"], p["tf_text"], p["len_text"] = keys, tf, len_text
    return p


def _blocked(chunks: int, terms: Sequence[tuple[np.ndarray, int]]) -> Corpus:
    """A corpus of ``chunks`` chunks (text 200 long) whose query terms are ``terms`` (postings, block size),
    term ids from 1, each cut into blocks of its size."""
    blobs: dict[int, bytes] = {}
    refs: list[BlockRef] = []
    for term_id, (p, size) in enumerate(terms, start=1):
        for i in range(0, len(p), size):
            block = encode_block(p[i : i + size])
            blobs[len(refs) + 1] = block.postings
            refs.append(
                BlockRef(
                    term_id, len(p), len(refs) + 1, block.n, block.min_key, block.max_key, "1", block.bounds.as_tuple()
                )
            )
    scoring = Bm25Scoring(0.9, 0.4, 1.0, 0.0, CorpusCounts(chunks, 0, 0, 200.0))
    return Corpus(refs, blobs, scoring, np.zeros(0, int), chunks)


def test_pruning_skips_postings_when_a_rare_term_sets_the_threshold() -> None:
    chunks = 40_000
    common = _postings(np.arange(0, chunks, 2), 1)
    rare = _postings(np.arange(0, 80, 2), 3)
    c = _blocked(chunks, [(common, 8192), (rare, 1024)])
    everyone = np.arange(chunks)
    scores, read, scored = _pruned(c, 10, everyone, known=False)
    assert _top(scores, everyone, 10) == _top(_exhaustive(c), everyone, 10)
    # The common term cannot lift a chunk without the rare one to the top 10: only its first block is read,
    # and in it only the rare term's chunks are looked up and scored.
    assert read == 40 + 8192
    assert scored == 40 + 40


def test_the_threshold_is_the_probed_chunks_full_scores() -> None:
    """A term of 4,000 chunks (40 of them three times) and five common terms of 20,000 chunks each, which the
    40 hold: the threshold is the 10th best *full* score, so every common term is non-essential and only the
    40 chunks are looked up in them. The common terms' bounds together exceed the first term's best
    contribution, so a threshold of partial scores (the first term's) would leave one of them to score whole."""
    chunks = 40_000
    first = _postings(np.arange(0, 40_000, 10), np.where(np.arange(4000) < 40, 3, 1))
    commons = [_postings(np.arange(0, 40_000, 2), 1) for _ in range(5)]
    c = _blocked(chunks, [(first, 8192)] + [(p, 8192) for p in commons])
    best = [float(posting_impacts(p, term_weight(c.scoring, len(p)), c.scoring).max()) for p in [first, *commons]]
    assert sum(best[1:]) > best[0]
    everyone = np.arange(chunks)
    for known in (True, False):
        scores, read, scored = _pruned(c, 10, everyone, known=known)
        assert _top(scores, everyone, 10) == _top(_exhaustive(c), everyone, 10)
        assert scored == 4000 + 5 * 40  # (the probe's lookups not counted)
        assert read == 4000 + 5 * 8192  # each common term's first block (it holds keys below 16,384)


def test_a_block_bound_covers_every_posting_whatever_the_parameters() -> None:
    rng = np.random.default_rng(3)
    for _ in range(200):
        p = np.zeros(int(rng.integers(1, 50)), dtype=POSTING)
        for f in FIELDS:
            p[f] = rng.integers(0, 256 if f != "len_text" else 3000, len(p))
        s = Bm25Scoring(
            float(rng.uniform(0, 3)),
            float(rng.uniform(0, 1)),
            float(rng.uniform(0, 3)),
            float(rng.uniform(0, 3)),
            CorpusCounts(100, *rng.uniform(0.1, 500, 3)),
        )
        w = term_weight(s, int(rng.integers(1, 100)))
        bound = block_upper_bounds(s, np.array([w]), np.array([BlockBounds.of(p).as_tuple()], dtype=float))
        assert posting_impacts(p, w, s).max() <= bound[0]
    unknown = block_upper_bounds(s, np.array([w]), np.full((1, 6), np.nan))
    assert unknown[0] == np.inf  # a block without bounds is never skipped


def test_a_block_merged_away_mid_search_is_reported() -> None:
    c = _corpus(np.random.default_rng(11))

    async def read(refs: Sequence[BlockRef]) -> dict[int, TermView]:
        return {}

    try:
        asyncio.run(pruned_scores(c.refs, c.scoring, c.dead, 5, read))
    except BlockVanished:
        return
    raise AssertionError("a missing block went unnoticed")


def test_a_term_read_without_one_of_its_blocks_is_reported() -> None:
    # The store answers with a view of the term that lacks one block asked for (merged away meanwhile): the
    # search must not take the term as read.
    rng = np.random.default_rng(12)
    c = next(c for c in map(_corpus, [rng] * 200) if any(len(m) > 1 for m in by_term_id(c.refs).values()))
    short: list[int] = []

    async def read(refs: Sequence[BlockRef]) -> dict[int, TermView]:
        views = {}
        for t, mine in by_term_id(refs).items():
            if len(mine) > 1 and not short:
                short.append(t)
                mine = mine[:-1]
            views[t] = TermView.of({(r.block_id, r.version): c.blobs[r.block_id] for r in mine})
        return views

    with pytest.raises(BlockVanished):
        asyncio.run(pruned_scores(c.refs, c.scoring, c.dead, 5, read, prune_from=0, seed_postings=0))
    assert short  # (the block was left out)


def test_a_terms_bound_over_each_candidate_is_its_largest_covering_blocks() -> None:
    """For each candidate, the largest bound among the term's blocks whose key range holds it (0 if none), with
    disjoint or overlapping ranges."""
    rng = np.random.default_rng(5)
    for trial in range(400):
        blocks, uppers = [], rng.random(int(rng.integers(1, 8)))
        ends = np.sort(rng.choice(1000, 2 * len(uppers), replace=False)).reshape(-1, 2)  # disjoint
        if trial % 2:
            ends = np.sort(rng.integers(0, 1000, (len(uppers), 2)), axis=1)  # may overlap
        for i, (low, high) in enumerate(rng.permutation(ends)):
            blocks.append(BlockRef(1, 1, i, 1, int(low), int(high), "1", None))
        candidates = np.sort(rng.choice(1000, int(rng.integers(0, 300)), replace=False)).astype(np.int64)
        expected = np.zeros(len(candidates))
        for block, upper in zip(blocks, uppers, strict=True):
            inside = (candidates >= block.min_key) & (candidates <= block.max_key)
            expected[inside] = np.maximum(expected[inside], upper)
        term = _Term(1, np.float32(1.0), blocks, uppers, len(blocks))
        assert np.array_equal(_covering_bound(term, candidates), expected), trial


def test_a_term_view_holds_its_blocks_in_key_order_and_its_saturation_per_scoring() -> None:
    """Blocks joined out of key order (a merged block's range overlapping another's) are held in key order, each
    posting with its own record; the saturation is computed once per scoring and again when it changes."""
    first, second = np.zeros(3, dtype=POSTING), np.zeros(2, dtype=POSTING)
    first["key"], first["tf_text"], first["len_text"] = (5, 9, 40), (1, 2, 3), 100
    second["key"], second["tf_text"], second["len_text"] = (2, 7), (4, 5), 100
    view = TermView.of({(1, "v"): first.tobytes(), (2, "v"): second.tobytes()})
    assert view.blocks == {(1, "v"), (2, "v")} and len(view) == 5 and view.held_bytes == 5 * (POSTING.itemsize + 8)
    assert view.keys.dtype == np.int32 and view.keys.tolist() == [2, 5, 7, 9, 40]
    assert view.packed["tf_text"].tolist() == [4, 1, 5, 2, 3]  # each key with its own posting
    assert view.lookup(np.array([1, 5, 9, 10, 40], dtype=np.int64))[1].tolist() == [1, 3, 4]
    assert not view.indexed and view.allow_index(math.inf, from_keys=6) and view.indexed
    assert view.held_bytes == 5 * (POSTING.itemsize + 8) + KeyIndex.bytes_for(view.keys)  # (charged before built)
    needles = np.array([1, 5, 9, 10, 40, 64, 10**6], dtype=np.int64)
    assert view.lookup(needles[:5])[1].tolist() == [1, 3, 4] and not view.index_built  # too few keys to build it
    held_mask, at = view.lookup(needles)
    assert held_mask.tolist() == [False, True, True, False, True, False, False] and at.tolist() == [1, 3, 4]
    assert view.index_built
    calls: list[str] = []

    def compute(packed: np.ndarray) -> np.ndarray:
        calls.append("computed")
        return packed["tf_text"].astype(np.float32)

    held = view.saturation(("k1", 0.9), compute)
    assert view.saturation(("k1", 0.9), compute) is held and len(calls) == 1
    view.saturation(("k1", 1.2), compute)
    assert len(calls) == 2
    joined = view.merged(TermView.of({(3, "v"): _postings(np.array([3, 41]), 1).tobytes()}))
    assert joined.keys.tolist() == [2, 3, 5, 7, 9, 40, 41] and len(joined.blocks) == 3


@pytest.mark.parametrize("threads", [2, 3, 7])
def test_sums_split_across_threads_by_key_range_are_the_same_bits(
    threads: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The exhaustive pass's sums split by key range across threads are those of one thread, bit for bit (each
    chunk's contributions in term order), removed chunks at 0, keys at range edges and empty ranges included."""
    monkeypatch.setattr(postings, "SPLIT_FROM_POSTINGS", 0)
    rng = np.random.default_rng(threads)
    scoring = Bm25Scoring(0.9, 0.4, 2.0, 0.5, CorpusCounts(1000, 4.0, 2.0, 20.0))
    views = []
    for term in range(12):
        keys = np.sort(rng.choice(1000, int(rng.integers(1, 600)), replace=False))
        if term == 0:
            keys = np.union1d(keys, [1000 * i // threads for i in range(threads)] + [999])  # on the cuts
        packed = _postings(keys, rng.integers(1, 9, len(keys)), 0)
        packed["len_text"] = rng.integers(1, 255, len(keys))
        packed["tf_title"] = rng.integers(0, 3, len(keys))
        views.append((TermView.of({(term, "v"): packed.tobytes()}), np.float32(rng.uniform(0.1, 5))))
    dead = np.array([3, 500, 999, 5000], dtype=np.int64)
    one = view_scores(views, scoring, 1000, dead)
    split = view_scores(views, scoring, 1000, dead, threads=threads)
    assert one.tobytes() == split.tobytes()
    assert one[3] == one[999] == 0 and np.count_nonzero(one) > 900
    assert view_scores(views[:0], scoring, 1000, dead, threads=threads).tobytes() == np.zeros(1000).tobytes()


def test_chunks_falling_below_the_threshold_after_one_term_are_not_looked_up_in_the_next() -> None:
    """400 chunks tie on the rare term (tf 3) and so all remain after the block bounds; looked up in the common
    term of the higher bound first, all but the 10 that hold it four times fall below the threshold, so the
    second common term is searched for those 10 alone (without the step between terms: for all 400)."""
    chunks = 40_000
    rare = _postings(np.arange(4000), np.where(np.arange(4000) < 400, 3, 1))
    first_keys = np.union1d(np.arange(0, chunks, 2), np.arange(10))
    first = _postings(first_keys, np.where(first_keys < 10, 4, 1))
    second = _postings(np.arange(chunks), np.where(np.arange(chunks) < 10, 3, 1))
    c = _blocked(chunks, [(rare, 8192), (first, 8192), (second, 8192)])
    everyone = np.arange(chunks)
    scores, read, scored = _pruned(c, 10, everyone, known=False)
    assert _top(scores, everyone, 10) == _top(_exhaustive(c), everyone, 10)
    in_first = int(np.isin(np.arange(400), first_keys).sum())  # the 400 found in the first common term
    assert scored == 4000 + in_first + 10
    assert read == 4000 + 8192 + 8192  # each common term's first block: the only one holding a remaining chunk


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 5000), st.sampled_from([0.001, 0.1, 0.5, 1.0]))
def test_a_key_index_finds_what_a_binary_search_finds(seed: int, space: int, density: float) -> None:
    """Every key of a space (and beyond the largest, and 0, and each word's first and last bit): held or not,
    and where, as :func:`located` says."""
    rng = np.random.default_rng(seed)
    keys = np.flatnonzero(rng.random(space) < density).astype(np.int32)
    if not len(keys):
        keys = np.array([space - 1], dtype=np.int32)
    index = KeyIndex(keys)
    assert index.held_bytes == KeyIndex.bytes_for(keys)
    needles = np.arange(space + 130, dtype=np.int64)
    needles = needles[rng.random(len(needles)) < 0.7]
    at, held = located(keys, needles.astype(np.int32))
    got_held, got_at = index.lookup(needles)
    assert np.array_equal(got_held, held) and np.array_equal(got_at, at[held])


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 4))
def test_partial_sums_are_the_same_bits_whole_or_split_into_key_ranges(seed: int, threads: int) -> None:
    """The partial sums taken by sorting, in one array of every key, or in key ranges on ``threads`` threads:
    the same chunks, the same bits (each chunk's contributions added in part order), removed chunks left out."""
    rng = np.random.default_rng(seed)
    size = int(rng.integers(1, 3000))
    parts = []
    for _ in range(int(rng.integers(1, 6))):
        keys = np.flatnonzero(rng.random(size) < rng.uniform(0.01, 0.9)).astype(np.int32)
        parts.append((keys, rng.uniform(0.0, 5.0, len(keys)).astype(np.float32)))
    dead = np.unique(rng.integers(0, size + 10, int(rng.integers(0, 20))))
    sorted_sums = _Sums.of(parts, dead, size, dense_share=1e9)
    whole = _Sums.of(parts, dead, size, dense_share=0.0, threads=1)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(pruning, "SPLIT_FROM_POSTINGS", 0)
        split = _Sums.of(parts, dead, size, dense_share=0.0, threads=threads)
        split_sorted = _Sums.of(parts, dead, size, dense_share=1e9, threads=threads)
    for sums in (whole, split, split_sorted):
        assert sums.keys.tolist() == sorted_sums.keys.tolist()
        assert sums.values.tobytes() == sorted_sums.values.tobytes()
    assert not np.isin(split.keys, dead).any()
