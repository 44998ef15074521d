"""Exact BM25 that skips what cannot reach the top ``k``: MaxScore over the query's terms, with the blocks'
score bounds (:mod:`~services.retriever.engine.lexical.blocks`) to drop candidates and skip blocks.

Where the exhaustive pass (:func:`~services.retriever.engine.lexical.postings.view_scores`) scores every
posting of every query term, this one:

1. lists the query's blocks with their bounds (no postings read) and bounds each term's contribution
   (the largest of its blocks');
2. scores the *seed* terms in full: those of the highest bounds (the rare terms, few postings) up to a
   share of the query's postings;
3. takes a threshold ``theta``: the ``k``-th best *full* score among the chunks of the best partial scores
   known to pass the filters, their other terms' postings looked up (as many terms as a budget of blocks
   allows, highest bounds first: the others left out, a lower score); the ``k``-th best score among all passing
   chunks is at least ``theta``. Known to pass: a resolved filter's chunks, or those the filters' check in SQL
   lets through, asked best full score first until ``k`` pass (the same ``theta`` as checking all of them,
   fewer random reads). (The partial scores alone, the rare terms', would give a threshold far below the final
   one: a common term's bound would seldom fit under it);
4. splits the other terms: the lowest-bound ones whose bounds sum below ``theta`` are *non-essential* (a chunk
   that holds none of the other terms cannot reach ``theta``), the rest are scored in full (and ``theta`` is
   taken again as in 3 from the best partial scores they make);
5. bounds each chunk seen so far by its partial score plus, for each non-essential term, the bound of the
   block whose key range holds it, and drops the chunks below ``theta``;
6. looks the remaining chunks up in the non-essential terms one term at a time, highest bound first (only the
   blocks whose range holds a remaining chunk are read, all in one read; in them the chunks are found by one
   binary search of the term's keys, or through its key index where the cache allows one, or, where they are
   many, by one pass of a mask): each chunk's bound then holds the term's exact contribution instead of its
   bound, and the chunks that fall below ``theta`` are dropped before the next term is looked up. A common term
   costs a search per remaining chunk instead of a pass over its postings. No chunk's lookups depend on
   another's, so consecutive ranges of the chunks are looked up on the scoring threads.

The scores it returns are those of the exhaustive pass (the same contributions summed in the same term order,
so the same bits) for every chunk that can still be among the ``k`` best passing chunks, and 0 for the others:
the caller ranks and checks them exactly as it does the exhaustive scores. With no threshold (fewer than ``k``
passing chunks found by the check) nothing is skipped; nor where skipping cannot pay (the non-essential terms
hold few of the query's postings, the essential terms many, or too many chunks are certain to remain for lookups
to be cheaper), nor for a query of many postings a key (long and common-word queries): every posting is then
scored in one pass, as exhaustively.

Terms come as :class:`~services.retriever.engine.lexical.blocks.TermView`: their keys decoded and their
saturations held (by the retriever's cache, for common terms), so a lookup is one binary search a term (a few
array operations through a :class:`~services.retriever.engine.lexical.blocks.KeyIndex`) and a contribution one
multiplication.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from services.retriever.engine.lexical.blocks import BlockKey, TermView, located
from services.retriever.engine.lexical.postings import (
    SPLIT_FROM_POSTINGS,
    BlockRef,
    BlockVanished,
    Bm25Scoring,
    KeyScores,
    best_keys,
    block_upper_bounds,
    in_ranges,
    key_span,
    term_weight,
    view_saturation,
    view_scores,
)

__all__ = ["BlockVanished", "PrunedScores", "ReadTerms", "pruned_scores"]

#: Reads terms by block reference: for each term of the references, a view holding at least those blocks (all of
#: the term's when it is held in memory); raises :class:`BlockVanished` for a block merged away.
ReadTerms = Callable[[Sequence[BlockRef]], Awaitable[Mapping[int, TermView]]]

#: Checks candidate keys (best first) against the filters in that order until the number given pass (all of them,
#: if fewer do): those found to pass.
CheckKeys = Callable[[np.ndarray, int], Awaitable[np.ndarray]]

#: The seed terms hold at least this many postings (or all the query's, if fewer)...
SEED_POSTINGS = 16_384

#: ...or this share of the query's postings, whichever is more...
SEED_SHARE = 0.125

#: ...but no more than this many a key of the corpus: a 200-term query's eighth (6 M postings at 3x10^6 chunks)
#: cost tens of milliseconds to sum before the search found it could not skip (such queries seldom can), where
#: fewer postings than chunks give the threshold its candidates as well. Time only, never the scores.
SEED_MAX_PER_KEY = 0.25

#: A query of fewer postings is scored whole: the threshold's check and the extra reads would cost more than
#: they save.
PRUNE_FROM_POSTINGS = 65_536

#: Nor is a query of more postings than this many a key of the corpus: nearly every chunk holds several of its
#: terms, and every such query of the benchmark (200-term queries, ~16 postings a key at 3x10^6 chunks; the 50
#: most frequent terms, ~14) scored every posting in the end, after its seed's sums and its threshold had cost
#: ~20 % more (the seventh session's runs). A question holds ~0.7 a key. Time only.
PRUNE_UNTIL_PER_KEY = 4.0

#: Non-essential terms holding less than this share of the query's postings are scored with the others: skipping
#: them would cost a second sum over the essential terms' postings and the lookups' steps, more than scoring them
#: (a 200-term query's few lowest-bound terms). An estimate, not tuned; time only.
SKIP_FROM_SHARE = 0.25

#: Nor is skipping tried where the essential terms (neither seed nor non-essential) hold more than this share of
#: the query's postings: whether lookups pay is judged from the chunks the seed's sums alone keep, and the essential
#: terms' sums can keep many times more (the query of the 50 most frequent terms at 3x10^6 chunks: 97,000 chunks
#: by the seed, 1.04 M once 40 % of its postings were summed, 130 ms spent before it scored every posting anyway).
#: Every question of the benchmark has none (all its terms past the seed non-essential). Time only.
ESSENTIAL_MAX_SHARE = 0.25

#: The threshold's chunks are looked up in the other terms, highest bound first, while those terms' blocks come
#: to at most this many: a 200-term query's threshold then costs a few milliseconds; the terms left out only make
#: it lower (still a bound), never wrong. 4,096 blocks (~33 M postings) hold every term of a question at 3x10^6
#: chunks: at 256 a question's common terms (2 M postings, 268 blocks) were left out at that size, and with the
#: lower threshold searches that could skip scored every posting (the seventh session's measurements).
PROBE_BLOCKS = 4096

#: A threshold is taken this much lower than found: the probed full scores are summed in another order than the
#: final ones, so they may differ in the last bits.
THRESHOLD_SLACK = 1e-9

#: Partial sums over more postings than this share of the key space are added into an array of every key (~5 ms
#: at 3x10^6 keys for a few hundred thousand postings) rather than found by sorting the postings' keys (~10 ns a
#: posting): the two cost about the same there (inline timeit on the 2-core machine). Time only, never the scores.
DENSE_SUMS_SHARE = 1 / 6

#: Remaining chunks are found in a non-essential term by binary search (a search each) while they, times this,
#: come to fewer than the term's postings; else by one pass of the remaining chunks' mask over the term's keys.
#: Also whether skipping pays at all: a chunk looked up in a term costs about what this many postings scored whole
#: do. Measured by line profile of the benchmark's slowest questions at 3x10^6 chunks on the 2-core machine
#: (eighth session, with the key index): every step of the lookups came to ~25 ns a chunk and term (6.2 ms for
#: ~30,000 chunks in 8 terms), a posting scored whole ~10 ns on two threads (12-14 ms for 1.2 M); 4 (from
#: ``timeit`` of a binary search, ~50 ns, before the key index) sent such questions to score every posting
#: after their seed and threshold were spent. The choice changes only the time, never the scores.
LOOKUP_SHARE = 2


@dataclass(frozen=True)
class PrunedScores:
    """Scores by chunk key (exact for every chunk that can be among the best; 0 for the others: of the remaining
    chunks alone where chunks were skipped), the postings read to get them (from memory or the store), those of
    them scored, and the threshold used (0: nothing skipped)."""

    scores: KeyScores
    postings_read: int
    threshold: float
    postings_scored: int = 0


@dataclass
class _Term:
    term_id: int
    weight: np.float32
    blocks: list[BlockRef]
    uppers: np.ndarray  # a bound per block, in ``blocks`` order
    postings: int

    @property
    def upper(self) -> float:
        return float(self.uppers.max())

    @functools.cached_property
    def listed(self) -> frozenset[BlockKey]:
        """The blocks the search listed for this term (each as its id and version)."""
        return frozenset((b.block_id, b.version) for b in self.blocks)

    @functools.cached_property
    def ranges(self) -> tuple[np.ndarray, np.ndarray]:
        """The smallest and largest key of each block, in ``blocks`` order."""
        return (
            np.fromiter((b.min_key for b in self.blocks), dtype=np.int64, count=len(self.blocks)),
            np.fromiter((b.max_key for b in self.blocks), dtype=np.int64, count=len(self.blocks)),
        )

    @functools.cached_property
    def disjoint(self) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """The blocks' smallest keys, largest keys and bounds ordered by key, where no two blocks' key ranges
        overlap (as compaction leaves them; writes may add blocks that do): None where some do."""
        lows, highs = self.ranges
        order = np.argsort(lows, kind="stable")
        lows, highs = lows[order], highs[order]
        if (highs[:-1] >= lows[1:]).any():
            return None
        return lows, highs, self.uppers[order]


#: A term's keys (``int32``) and their postings' contributions (``float32``).
_Part = tuple[np.ndarray, np.ndarray]

#: Reads (once in a search) terms' blocks, given as positions in each term's ``blocks`` (None: all of them): a view
#: of each term holding at least those.
_ReadBlocks = Callable[[Sequence[tuple[_Term, np.ndarray | None]]], Awaitable[Mapping[int, TermView]]]


@dataclass(frozen=True)
class _Sums:
    """Partial scores of the chunks some terms hold: their keys (sorted, distinct; removed chunks left out) and
    sums. Only the chunks the terms hold, not an array as long as the corpus: at 3x10^6 chunks each pass over one
    cost ~1-2 ms, and a search made about ten."""

    keys: np.ndarray
    values: np.ndarray

    @classmethod
    def of(cls, parts: Sequence[_Part], dead: np.ndarray, size: int, dense_share: float, threads: int = 1) -> _Sums:
        """The sums of ``parts`` (keys below ``size``) per key, those above 0 (contributions are never negative),
        in part order; over more than ``dense_share`` (:data:`DENSE_SUMS_SHARE`) postings a key, counted into
        arrays of every key, the key space split across ``threads`` from :data:`SPLIT_FROM_POSTINGS` postings."""
        postings = sum(len(part[0]) for part in parts)
        # Many postings for the key space (a question's seed at 3x10^6 chunks, a long query's): counted into an
        # array of each key range (750,000 postings at 3x10^6 keys: 12.6-14 ms on one thread, 7-9 on two); fewer:
        # found by sorting the range's keys (~496,000 in 7 parts at 3x10^6 keys: 9-18 ms on one, 4.5 on two).
        # Either way the key ranges on their own threads from SPLIT_FROM_POSTINGS postings (inline timeit).
        summed = _dense_range if postings > size * dense_share else _sorted_range
        split = threads if postings >= SPLIT_FROM_POSTINGS else 1
        ranges = in_ranges(functools.partial(summed, parts, dead), size, split)
        if len(ranges) == 1:
            return cls(*ranges[0])
        return cls(np.concatenate([r[0] for r in ranges]), np.concatenate([r[1] for r in ranges]))

    def part(self) -> _Part:
        return self.keys, self.values


def _sorted_range(parts: Sequence[_Part], dead: np.ndarray, low: int, high: int) -> tuple[np.ndarray, np.ndarray]:
    """The keys in ``[low, high)`` that ``parts`` hold (sorted, removed ones and sums of 0 left out) and their
    sums, in part order: found by sorting the range's keys (a stable sort merges the parts' sorted runs, timsort:
    ~2.7 ms for 257,000 keys in 7 runs, where a quicksort of them took 6.8 and of key and position packed in one
    integer 12; inline timeit, numpy 2.4)."""
    keys, values = _joined(parts, low, high)
    if not len(keys):
        return keys.astype(np.int64), values.astype(np.float64)
    order = np.argsort(keys, kind="stable")
    keys = keys[order].astype(np.int64)
    starts = np.flatnonzero(np.concatenate(([True], keys[1:] != keys[:-1])))
    keys, sums = keys[starts], np.add.reduceat(values[order].astype(np.float64), starts)
    live = sums > 0
    if len(dead):
        live &= ~np.isin(keys, dead)
    return keys[live], sums[live]


def _joined(parts: Sequence[_Part], low: int, high: int) -> tuple[np.ndarray, np.ndarray]:
    """The postings of ``parts`` with keys in ``[low, high)``: keys and contributions, joined in part order."""
    bounds = [key_span(keys, low, high) for keys, _ in parts]
    keys = np.concatenate([part[0][first:last] for part, (first, last) in zip(parts, bounds, strict=True)])
    values = np.concatenate([part[1][first:last] for part, (first, last) in zip(parts, bounds, strict=True)])
    return keys, values


def _dense_range(parts: Sequence[_Part], dead: np.ndarray, low: int, high: int) -> tuple[np.ndarray, np.ndarray]:
    """The keys in ``[low, high)`` that ``parts`` hold (sorted, removed ones left out) and their sums, in part
    order: bincount adds in the order given, the parts' postings of the range joined in part order (~35 % faster
    than adding part by part into one array: inline timeit, 750,000 postings at 3x10^6 keys)."""
    keys, values = _joined(parts, low, high)
    dense = np.bincount(keys - low, weights=values, minlength=high - low)
    gone = dead[(dead >= low) & (dead < high)]
    dense[gone - low] = 0.0
    held = np.flatnonzero(dense > 0)
    return (held + low).astype(np.int64), dense[held]


async def pruned_scores(
    refs: Sequence[BlockRef],
    scoring: Bm25Scoring,
    dead: np.ndarray,
    k: int,
    read: ReadTerms,
    *,
    passing: np.ndarray | None = None,
    check: CheckKeys | None = None,
    may_pass: Callable[[int], np.ndarray] | None = None,
    probe: int = 256,
    seed_postings: int | None = None,
    seed_share: float | None = None,
    prune_from: int | None = None,
    lookup_share: int | None = None,
    probe_blocks: int | None = None,
    skip_from_share: float | None = None,
    essential_max_share: float | None = None,
    prune_until_per_key: float | None = None,
    dense_sums_share: float | None = None,
    threads: int = 1,
) -> PrunedScores:
    """BM25F scores of the chunks that can be among the ``k`` best passing the filters (see the module).

    ``passing``: the keys of every chunk that passes (a resolved filter), else ``check`` verifies the
    ``probe`` best partial scores (after ``may_pass``, the doc values' mask of chunks that may pass, when given)
    in SQL; neither: no chunk is known to pass and nothing is skipped. ``dead``: keys of removed chunks. The
    seed terms hold up to ``seed_postings`` or ``seed_share`` of the query's postings, whichever is more
    (default :data:`SEED_POSTINGS`, :data:`SEED_SHARE`); a query of fewer than ``prune_from`` postings
    (default :data:`PRUNE_FROM_POSTINGS`) is scored whole, and so is one of more than ``prune_until_per_key``
    a key (default :data:`PRUNE_UNTIL_PER_KEY`). ``lookup_share`` (default :data:`LOOKUP_SHARE`)
    chooses between searching a term for the remaining chunks and a pass over its keys, and whether skipping
    pays at all (with ``skip_from_share``, default :data:`SKIP_FROM_SHARE`, and ``essential_max_share``, default
    :data:`ESSENTIAL_MAX_SHARE`); ``probe_blocks`` bounds the terms
    the threshold's full scores look their chunks up in (:data:`PROBE_BLOCKS`); ``dense_sums_share``: when the
    partial sums are counted into arrays of every key (:data:`DENSE_SUMS_SHARE`); ``threads``: what a pass over
    every posting (:func:`~services.retriever.engine.lexical.postings.view_scores`) and such partial sums are
    split across."""
    share = LOOKUP_SHARE if lookup_share is None else lookup_share
    probe_budget = PROBE_BLOCKS if probe_blocks is None else probe_blocks
    skip_from = SKIP_FROM_SHARE if skip_from_share is None else skip_from_share
    essential_max = ESSENTIAL_MAX_SHARE if essential_max_share is None else essential_max_share
    dense_share = DENSE_SUMS_SHARE if dense_sums_share is None else dense_sums_share
    if not refs:
        return PrunedScores(KeyScores(np.zeros(0)), 0, 0.0)
    terms = _terms(refs, scoring)
    size = max(int(t.ranges[1].max()) for t in terms) + 1
    total = sum(t.postings for t in terms)
    held: dict[int, TermView] = {}  # every term read by this search, by id (read once)
    have: dict[int, np.ndarray] = {}  # by term id: which of its blocks (in ``blocks`` order) ``held`` holds

    async def read_once(wanted: Sequence[tuple[_Term, np.ndarray | None]]) -> Mapping[int, TermView]:
        """The views of the terms ``wanted`` holding at least the blocks given (positions in the term's
        ``blocks``; None: all of them): only the blocks not held yet are read, a term held whole (the cache's
        common terms) not looked at block by block again."""
        asked: list[tuple[_Term, np.ndarray]] = []
        for t, at in wanted:
            mask = have.get(t.term_id)
            if at is None:
                at = np.arange(len(t.blocks)) if mask is None else np.flatnonzero(~mask)
            elif mask is not None:
                at = at[~mask[at]]
            if len(at):
                asked.append((t, at))
        if not asked:
            return held
        for term_id, view in (await read([t.blocks[i] for t, at in asked for i in at])).items():
            before = held.get(term_id)
            held[term_id] = view if before is None or view.blocks >= before.blocks else before.merged(view)
        for t, at in asked:
            got = held.get(t.term_id)
            mask = have.setdefault(t.term_id, np.zeros(len(t.blocks), dtype=bool))
            if got is not None and t.listed <= got.blocks:
                mask[:] = True  # (a view held whole: no block of the term is looked for again)
            elif got is None or any((t.blocks[i].block_id, t.blocks[i].version) not in got.blocks for i in at):
                raise BlockVanished
            else:
                mask[at] = True
        return held

    def read_postings() -> int:
        return sum(len(view) for view in held.values())

    until = PRUNE_UNTIL_PER_KEY if prune_until_per_key is None else prune_until_per_key
    if total < (PRUNE_FROM_POSTINGS if prune_from is None else prune_from) or total > until * size:
        # Too few postings for skipping to pay for its extra steps, or too many for it to skip: all scored at
        # once, as exhaustively.
        scores = _every_posting(terms, await read_once([(t, None) for t in terms]), scoring, size, dead, threads)
        return PrunedScores(KeyScores(scores), read_postings(), 0.0, total)
    # Highest bound first (rare terms), fewest postings first among equals.
    by_upper = sorted(terms, key=lambda t: (-t.upper, t.postings))
    budget = max(
        SEED_POSTINGS if seed_postings is None else seed_postings,
        min(int(total * (SEED_SHARE if seed_share is None else seed_share)), int(size * SEED_MAX_PER_KEY)),
    )
    enough = 2 * max(probe, 2 * k)  # postings enough for the check to find k passing chunks among them
    seed: list[_Term] = []
    holding = 0
    for t in by_upper:
        if holding >= enough and holding + t.postings > budget:
            break
        seed.append(t)
        holding += t.postings
    full: dict[int, _Part] = {}  # term id -> its keys and contributions, every posting
    await _score_full(seed, scoring, read_once, full)
    partial = _Sums.of(list(full.values()), dead, size, dense_share, threads)
    threshold = 0.0
    rest = [t for t in by_upper if t.term_id not in full]
    filtering = _Filtering(k, passing, check, may_pass, probe, size)
    if rest:
        threshold = await filtering.threshold(partial, _probed(rest, probe_budget), scoring, read_once)
    cutoff = threshold * (1 - THRESHOLD_SLACK)
    # Non-essential: from the lowest bound up, while the bounds together stay below the threshold.
    optional: list[_Term] = []
    summed = 0.0
    for t in sorted(rest, key=lambda t: t.upper):
        if summed + t.upper >= cutoff:
            break
        optional.append(t)
        summed += t.upper
    skippable = sum(t.postings for t in optional)
    unseeded = total - holding - skippable  # the essential terms' postings, to be summed before any lookup
    # Chunks certain to remain (their partial score alone reaches the threshold less the non-essential terms'
    # bounds): too many for lookups to pay (a long or common-word query's)? Or the essential terms too large a
    # share for that count to say much (see ESSENTIAL_MAX_SHARE)?
    if (
        skippable < skip_from * total
        or unseeded > essential_max * total
        or not _lookups_pay(int(np.count_nonzero(partial.values >= cutoff - summed)), optional, share, skippable)
    ):
        # Too little to skip: every posting scored in one pass, as exhaustively (no per-term sums to join).
        scores = _every_posting(terms, await read_once([(t, None) for t in terms]), scoring, size, dead, threads)
        return PrunedScores(KeyScores(scores), read_postings(), 0.0, total)
    optional_ids = {t.term_id for t in optional}
    essential = [t for t in rest if t.term_id not in optional_ids]
    if essential:
        await _score_full(essential, scoring, read_once, full)
        partial = _Sums.of([partial.part(), *(full[t.term_id] for t in essential)], dead, size, dense_share, threads)
        # The threshold again, from the chunks of the best partial scores now (the essential terms' sums in them),
        # every non-essential term looked up in them: they are nearer the k best than the seed's best were.
        threshold = max(threshold, await filtering.threshold(partial, optional, scoring, read_once))
        cutoff = threshold * (1 - THRESHOLD_SLACK)
    scored = sum(len(keys) for keys, _ in full.values())  # (the threshold's few lookups not counted)
    # The chunks that can still be among the best: first with every non-essential term at its bound (one
    # pass), then with the bounds of its blocks that hold them.
    remain = partial.values >= cutoff - summed  # (summed < cutoff: only chunks with a partial score)
    candidates = partial.keys[remain]
    # The essential terms' sums are spent either way: what the lookups are weighed against now is the pass over
    # every posting that exact sums would take instead (not only the non-essential terms': per-chunk sums in term
    # order cannot be taken from the partial ones), so lookups that cost more than the skipped postings but less
    # than all of them still go ahead (a 200-term query that scored half its postings took both before).
    if not _lookups_pay(len(candidates), optional, share, total):
        # Too many chunks left even for that: every posting scored after all, as exhaustively (term by term,
        # split across threads; a sum over one array of all of them copied a 200-term query's 47 M postings).
        scores = _every_posting(terms, await read_once([(t, None) for t in terms]), scoring, size, dead, threads)
        return PrunedScores(KeyScores(scores), read_postings(), threshold, scored + skippable)
    alive = np.zeros(size, dtype=bool)  # the remaining chunks by key (only their pages are written)
    alive[candidates] = True
    looked_up, survivors = await _look_up(
        optional, candidates, partial.values[remain], alive, cutoff, scoring, read_once, share, threads
    )
    scored += sum(len(keys) for keys, _ in looked_up.values())
    # The exhaustive pass's sums for the remaining chunks: each one's contributions in term order (every term
    # holds a remaining chunk once: each remaining chunk searched in the term's sorted keys, far fewer steps than
    # a pass over a seed term's keys: ~1 ms a question at 3x10^6 chunks).
    sums = np.zeros(len(survivors))
    for _, (keys, values) in sorted({**full, **looked_up}.items()):
        at, hit = located(keys, survivors.astype(keys.dtype, copy=False))  # (mixed types would copy the keys)
        sums[hit] += values[at[hit]]
    return PrunedScores(KeyScores(sums, survivors), read_postings(), threshold, scored)


def _lookups_pay(chunks: int, optional: Sequence[_Term], share: int, skippable: int) -> bool:
    """Whether looking ``chunks`` up in each of the ``optional`` terms costs less than scoring their ``skippable``
    postings whole (:data:`LOOKUP_SHARE`)."""
    return chunks * len(optional) * share < skippable


async def _look_up(
    optional: Sequence[_Term],
    candidates: np.ndarray,
    partial: np.ndarray,
    alive: np.ndarray,
    cutoff: float,
    scoring: Bm25Scoring,
    read: _ReadBlocks,
    share: int,
    threads: int = 1,
) -> tuple[dict[int, _Part], np.ndarray]:
    """The ``candidates`` (sorted keys, their partial scores ``partial``; ``alive`` the same as a mask by key:
    updated as chunks are dropped) looked up in the ``optional`` terms, highest bound first; after each term the
    chunks whose bound (partial score, the exact contributions found so far and the other terms' covering bounds)
    falls below ``cutoff`` are dropped. The postings found, by term id, and the chunks that remain.

    The chunks are first bounded by every term's covering bounds and those below ``cutoff`` dropped; the terms'
    blocks that hold one of the others are then read at once (one read, not one a term), and each chunk's lookups
    depend on no other chunk: from :data:`SPLIT_LOOKUPS_FROM` chunks, consecutive ranges of them are looked up on
    their own ``threads`` (the same contributions and drops, chunk by chunk)."""
    bound = partial.astype(np.float64)
    for t in optional:
        bound += _covering_bound(t, candidates)
    keep = bound >= cutoff
    alive[candidates[~keep]] = False
    candidates, bound = candidates[keep], bound[keep]
    by_upper = sorted(optional, key=lambda t: -t.upper)
    views = await read([(t, _blocks_holding(t, candidates)) for t in by_upper])
    steps: list[_Step] = []
    for t in by_upper:
        if (view := views.get(t.term_id)) is not None:
            # What the threads share made now (none of them then writes to a view; the terms' blocks in key
            # order were by the covering bounds above): the key index, where a lookup of every chunk would build
            # it; the saturations.
            view.index_for(len(candidates))
            steps.append(_Step(t, view, view_saturation(view, scoring)))
    split = threads if len(candidates) >= SPLIT_LOOKUPS_FROM else 1
    task = functools.partial(_look_up_range, steps, candidates, bound, alive, cutoff, share)
    ranges = in_ranges(task, len(candidates), split)
    found = {
        step.term.term_id: (
            np.concatenate([r[0][i][0] for r in ranges]),
            np.concatenate([r[0][i][1] for r in ranges]),
        )
        for i, step in enumerate(steps)
    }
    return found, np.concatenate([r[1] for r in ranges])


#: Remaining chunks are looked up on several threads (:func:`_look_up`) from this many: ~30,000 a question at
#: 3x10^6 chunks, ~25 ns a chunk and term; handing a range to another thread costs ~0.1 ms.
SPLIT_LOOKUPS_FROM = 8192


@dataclass(frozen=True)
class _Step:
    """A non-essential term to look chunks up in: its view (holding at least its blocks that hold a chunk looked
    up) and its postings' saturations."""

    term: _Term
    view: TermView
    saturation: np.ndarray


def _look_up_range(
    steps: Sequence[_Step],
    candidates: np.ndarray,
    bound: np.ndarray,
    alive: np.ndarray,
    cutoff: float,
    share: int,
    low: int,
    high: int,
) -> tuple[list[_Part], np.ndarray]:
    """:func:`_look_up` of ``candidates[low:high]`` (their bounds ``bound[low:high]``): the postings found in each
    step's term (in ``steps`` order) and the chunks that remain; ``share`` (:data:`LOOKUP_SHARE`): when to search
    a term's keys for the chunks rather than pass over them. Writes ``alive`` only at those chunks' keys."""
    keys, bound = candidates[low:high], bound[low:high].copy()
    found: list[_Part] = []
    for step in steps:
        keep = bound >= cutoff
        if not keep.all():
            alive[keys[~keep]] = False
            keys, bound = keys[keep], bound[keep]
        view = step.view
        if not len(keys):
            found.append((keys, np.zeros(0, dtype=np.float32)))
            continue
        # The term's postings in the chunks' key span: few (or the term's keys indexed: a few steps each) looked
        # up each; many: one pass of their mask over the span.
        first, last = key_span(view.keys, int(keys[0]), int(keys[-1]) + 1)
        if len(keys) * (1 if view.indexed else share) <= last - first:
            held, at = view.lookup(keys)
        else:
            at = first + np.flatnonzero(alive[view.keys[first:last]])
            held = np.zeros(len(keys), dtype=bool)
            held[np.searchsorted(keys, view.keys[at])] = True
        values = step.saturation[at] * step.term.weight
        found.append((keys[held], values))
        # The term's covering bounds again, over the remaining chunks alone (a few array steps; keeping every
        # term's and dropping chunks from each after each term cost ~2 ms a question at 3x10^6 chunks).
        bound -= _covering_bound(step.term, keys)
        bound[held] += values
    keep = bound >= cutoff
    alive[keys[~keep]] = False
    return found, keys[keep]


def _every_posting(
    terms: Sequence[_Term],
    views: Mapping[int, TermView],
    scoring: Bm25Scoring,
    size: int,
    dead: np.ndarray,
    threads: int,
) -> np.ndarray:
    """The exhaustive pass's scores (every posting of every term, summed in term order) from ``views``."""
    in_order = sorted(terms, key=lambda t: t.term_id)
    return view_scores([(views[t.term_id], t.weight) for t in in_order], scoring, size, dead, threads=threads)


def _terms(refs: Sequence[BlockRef], scoring: Bm25Scoring) -> list[_Term]:
    """The query's terms with their blocks, the blocks' bounds and key ranges (column by column: a question lists
    ~600 blocks at 3x10^6 chunks, and a pass over them in Python costs ~0.1 ms)."""
    if not refs:
        return []
    columns = list(zip(*refs, strict=True))
    term_ids = np.array(columns[0], dtype=np.int64)
    dfs = np.array(columns[1], dtype=np.int64)
    postings = np.array(columns[3], dtype=np.int64)
    lows, highs = np.array(columns[4], dtype=np.int64), np.array(columns[5], dtype=np.int64)
    unknown = (np.nan,) * 6
    listed = columns[7]
    bounds = np.array(listed if None not in listed else [unknown if b is None else b for b in listed], dtype=np.float64)
    order = np.argsort(term_ids, kind="stable")  # (a term's blocks in the order listed)
    starts = np.flatnonzero(np.concatenate(([True], term_ids[order][1:] != term_ids[order][:-1])))
    firsts = order[starts]  # each term's first block
    weights = {int(term_ids[i]): term_weight(scoring, int(dfs[i])) for i in firsts}
    block_weights = np.array([weights[int(t)] for t in term_ids[firsts]], dtype=np.float32)
    ends = np.append(starts[1:], len(refs))
    uppers = block_upper_bounds(scoring, np.repeat(block_weights, ends - starts), bounds[order])
    counts = np.add.reduceat(postings[order], starts)
    terms = []
    for i in np.argsort(firsts, kind="stable"):  # (the terms in the order their first blocks were listed)
        rows = order[starts[i] : ends[i]]
        term_id = int(term_ids[rows[0]])
        term = _Term(term_id, weights[term_id], [refs[j] for j in rows], uppers[starts[i] : ends[i]], int(counts[i]))
        term.ranges = (lows[rows], highs[rows])
        terms.append(term)
    return terms


async def _score_full(terms: Sequence[_Term], scoring: Bm25Scoring, read: _ReadBlocks, into: dict[int, _Part]) -> None:
    """Read every block of ``terms`` and keep each term's keys and contributions."""
    views = await read([(t, None) for t in terms])
    for t in terms:
        view = views[t.term_id]
        into[t.term_id] = (view.keys, view_saturation(view, scoring) * t.weight)


@dataclass(frozen=True)
class _Filtering:
    """What a search knows of the chunks that pass its filters, and how it takes a threshold from them: the ``k``
    best full scores of the chunks of the best partial scores (``probe`` of them) that are known to pass (a
    resolved filter's chunks ``passing``, or those ``check`` lets through, after the doc values' ``may_pass``
    mask for ``size`` keys when given)."""

    k: int
    passing: np.ndarray | None
    check: CheckKeys | None
    may_pass: Callable[[int], np.ndarray] | None
    probe: int
    size: int

    async def threshold(self, partial: _Sums, terms: Sequence[_Term], scoring: Bm25Scoring, read: _ReadBlocks) -> float:
        """The ``k``-th best score among the best ``partial`` scores' chunks known to pass, ``terms`` (all the
        terms not in ``partial``, or some: a lower score) looked up in them; 0 with fewer than ``k``. The ``k``-th
        best score of all passing chunks is at least this."""
        k = self.k
        best, best_partial = _threshold_candidates(
            partial, k, self.passing, self.check is not None, self.may_pass, self.probe, self.size
        )
        if len(best) < k:
            return 0.0
        probed = await _full_scores(best, best_partial, terms, scoring, read)
        if self.passing is None and self.check is not None:  # best full score first, until k pass
            passed = np.sort(await self.check(best[np.argsort(-probed, kind="stable")], k))
            probed = probed[np.searchsorted(best, passed)]
        if len(probed) < k:
            return 0.0
        return float(np.partition(probed, len(probed) - k)[len(probed) - k])


def _threshold_candidates(
    partial: _Sums,
    k: int,
    passing: np.ndarray | None,
    checked: bool,
    may_pass: Callable[[int], np.ndarray] | None,
    probe: int,
    size: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Keys (sorted) and partial scores of the best partial scores (up to ``max(probe, 2 * k)``, all positive)
    the threshold is taken among: of a resolved filter's chunks (``passing``: they pass), or of all that may
    pass (``may_pass``, the doc values' mask by key for ``size`` keys, when given), to be ``checked``; none
    without either."""
    count = max(probe, 2 * k)
    none = np.zeros(0, dtype=np.int64), np.zeros(0)
    if not len(partial.keys):
        return none
    if passing is not None:
        at, held = located(partial.keys, passing)
        at = at[held]
        at = at[partial.values[at] > 0]
        if len(at) > count:
            at = at[np.argpartition(-partial.values[at], count - 1)[:count]]
    elif checked:
        ranked = partial.values if may_pass is None else partial.values * may_pass(size)[partial.keys]
        at = best_keys(ranked, count)
    else:
        return none
    at = np.sort(at)
    return partial.keys[at], partial.values[at]


def _probed(rest: Sequence[_Term], blocks: int) -> list[_Term]:
    """The terms whose blocks the threshold's chunks are looked up in: the highest bounds first (the most they
    can raise it), while their blocks come to at most ``blocks``."""
    chosen: list[_Term] = []
    held = 0
    for t in sorted(rest, key=lambda t: -t.upper):
        if held + len(t.blocks) > blocks:
            break
        chosen.append(t)
        held += len(t.blocks)
    return chosen


async def _full_scores(
    keys: np.ndarray, partial: np.ndarray, rest: Sequence[_Term], scoring: Bm25Scoring, read: _ReadBlocks
) -> np.ndarray:
    """The scores of ``keys`` (sorted) over the terms scored so far (their sums ``partial``) and ``rest`` (all
    other terms, or some: then a lower bound of their full scores): each key's posting in each of those terms,
    found by binary search in the blocks whose range holds it, in key order. Summed in another order than the
    final scores (the threshold's slack covers it)."""
    wanted = [(t, at) for t in rest if len(at := _blocks_holding(t, keys))]
    full: np.ndarray = partial.astype(np.float64)
    if not wanted:
        return full
    views = await read(wanted)
    for t, _ in wanted:
        view = views[t.term_id]
        held, at = view.lookup(keys)
        full[held] += view_saturation(view, scoring)[at] * t.weight
    return full


def _covering_bound(term: _Term, candidates: np.ndarray) -> np.ndarray:
    """For each of ``candidates`` (sorted keys), the most ``term`` can add to it: the largest bound of the
    term's blocks whose key range holds it (0 where none does)."""
    if term.disjoint is not None:
        # One block at most holds each key, the blocks in key order: the candidates fall in runs (before the
        # first block, in it, between it and the next, ...), each run's bound repeated over it.
        lows, highs, uppers = term.disjoint
        edges = np.empty(2 * len(lows) + 2, dtype=np.int64)
        edges[0], edges[-1] = 0, len(candidates)
        edges[1:-1:2] = np.searchsorted(candidates, lows, side="left")
        edges[2:-1:2] = np.searchsorted(candidates, highs, side="right")
        bounds = np.zeros(2 * len(lows) + 1)
        bounds[1::2] = uppers
        return np.repeat(bounds, np.diff(edges))
    out = np.zeros(len(candidates))
    first = np.searchsorted(candidates, term.ranges[0], side="left")
    last = np.searchsorted(candidates, term.ranges[1], side="right")
    for low, high, upper in zip(first, last, term.uppers, strict=True):
        if high > low:
            np.maximum(out[low:high], upper, out=out[low:high])
    return out


def _blocks_holding(term: _Term, keys: np.ndarray) -> np.ndarray:
    """The blocks of ``term`` whose key range holds one of ``keys`` (sorted): their positions in its ``blocks``."""
    if not len(keys):
        return np.zeros(0, dtype=np.intp)
    lows = np.searchsorted(keys, term.ranges[0], side="left")
    highs = np.searchsorted(keys, term.ranges[1], side="right")
    return np.flatnonzero(highs > lows)
