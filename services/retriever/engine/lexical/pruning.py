"""Exact BM25 that skips what cannot reach the top ``k``: MaxScore over the query's terms, with the blocks'
score bounds (:mod:`~services.retriever.engine.lexical.blocks`) to drop candidates and skip blocks.

Where the exhaustive pass (:func:`~services.retriever.engine.lexical.postings.bm25_scores`) scores every
posting of every query term, this one:

1. lists the query's blocks with their bounds (no postings read) and bounds each term's contribution
   (the largest of its blocks');
2. scores the *seed* terms in full: those of the highest bounds (the rare terms, few postings) up to a
   share of the query's postings;
3. takes a threshold ``theta``: the ``k``-th best *full* score among the chunks of the best partial scores
   known to pass the filters (a resolved filter's chunks, or the best partial scores checked against the
   filters in SQL), their other terms' postings looked up in those terms' blocks (as many as a budget of blocks
   allows, highest bounds first: the others left out, a lower score); the ``k``-th best score among all passing
   chunks is at least ``theta``. (The partial scores alone, the rare terms', would give a threshold
   far below the final one: a common term's bound would seldom fit under it);
4. splits the other terms: the lowest-bound ones whose bounds sum below ``theta`` are *non-essential* (a chunk
   that holds none of the other terms cannot reach ``theta``), the rest are scored in full;
5. bounds each chunk seen so far by its partial score plus, for each non-essential term, the bound of the
   block whose key range holds it; the chunks below ``theta`` are dropped, and only the non-essential blocks
   whose range holds a remaining chunk are read, and in them only the remaining chunks' postings are found (a
   binary search of the block's decoded keys) and scored, or, where the remaining chunks are many, the blocks
   are scored whole: a common term costs a few lookups per block instead of a pass over its postings.

The scores it returns are those of the exhaustive pass (the same contributions summed in the same term order,
so the same bits) for every chunk that can still be among the ``k`` best passing chunks, and 0 for the others:
the caller ranks and checks them exactly as it does the exhaustive scores. With no threshold (fewer than ``k``
passing chunks found by the check) nothing is skipped; nor where skipping cannot pay (the non-essential terms
hold few of the query's postings, or too many chunks are certain to remain for lookups to be cheaper: long and
common-word queries): every posting is then scored in one pass, as exhaustively.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from services.retriever.engine.lexical.blocks import POSTING, ReadBlock
from services.retriever.engine.lexical.postings import (
    BlockRef,
    Bm25Scoring,
    best_keys,
    block_upper_bounds,
    posting_impacts,
    term_weight,
)

#: Reads blocks by reference: the blocks by block id (a block merged away is missing).
ReadBlocks = Callable[[Sequence[BlockRef]], Awaitable[Mapping[int, ReadBlock]]]

#: Checks candidate keys (best first) against the filters: those that pass.
CheckKeys = Callable[[np.ndarray], Awaitable[np.ndarray]]

#: The seed terms hold at least this many postings (or all the query's, if fewer)...
SEED_POSTINGS = 16_384

#: ...or this share of the query's postings, whichever is more.
SEED_SHARE = 0.125

#: A query of fewer postings is scored whole: the threshold's check and the extra reads would cost more than
#: they save.
PRUNE_FROM_POSTINGS = 65_536

#: Non-essential terms holding less than this share of the query's postings are scored with the others: skipping
#: them would cost a second sum over the essential terms' postings and passes over arrays as long as the corpus,
#: more than scoring them (a 200-term query's few lowest-bound terms). An estimate, not tuned; time only.
SKIP_FROM_SHARE = 0.25

#: The threshold's chunks are looked up in the other terms' blocks, highest bound first, up to this many blocks
#: (~10 us of Python each): a 200-term query's threshold then costs a few milliseconds, not a search in every
#: block of every term; the terms left out only make it lower (still a bound), never wrong.
PROBE_BLOCKS = 256

#: A threshold is taken this much lower than found: the probed full scores are summed in another order than the
#: final ones, so they may differ in the last bits.
THRESHOLD_SLACK = 1e-9


#: A non-essential term's blocks are searched for the chunks still needed (a binary search each in a block's
#: decoded keys) while those chunks, times this, and the blocks, times :data:`BLOCK_COST`, come to fewer than
#: the blocks' postings; else its blocks are scored whole with the essential ones' single pass. Both in postings
#: scored for the same time, from an inline ``timeit`` of the steps at 10^6 chunks on the 2-core machine (not a
#: bench script): a remaining chunk's search ~50 ns, a posting scored whole ~7 ns plus ~10 ns to add it to the
#: corpus-long sum, a block handled on its own ~10 us. Not tuned; the choice changes only the time, never the
#: scores. :data:`LOOKUP_SHARE` also decides whether skipping pays at all (see :func:`pruned_scores`).
LOOKUP_SHARE = 4
BLOCK_COST = 512


class BlockVanished(Exception):
    """A listed block was merged away before it was read (compaction ran meanwhile): list again."""


@dataclass(frozen=True)
class PrunedScores:
    """Scores by chunk key (exact for every chunk that can be among the best; 0 for the others), the postings
    read to get them (from memory or the store), those of them scored, and the threshold used (0: nothing
    skipped)."""

    scores: np.ndarray
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


async def pruned_scores(
    refs: Sequence[BlockRef],
    scoring: Bm25Scoring,
    dead: np.ndarray,
    k: int,
    read: ReadBlocks,
    *,
    passing: np.ndarray | None = None,
    check: CheckKeys | None = None,
    may_pass: Callable[[int], np.ndarray] | None = None,
    probe: int = 256,
    seed_postings: int | None = None,
    seed_share: float | None = None,
    prune_from: int | None = None,
    lookup_share: int | None = None,
    block_cost: int | None = None,
    probe_blocks: int | None = None,
    skip_from_share: float | None = None,
) -> PrunedScores:
    """BM25F scores of the chunks that can be among the ``k`` best passing the filters (see the module).

    ``passing``: the keys of every chunk that passes (a resolved filter), else ``check`` verifies the
    ``probe`` best partial scores (after ``may_pass``, the doc values' mask of chunks that may pass, when given)
    in SQL; neither: no chunk is known to pass and nothing is skipped. ``dead``: keys of removed chunks. The
    seed terms hold up to ``seed_postings`` or ``seed_share`` of the query's postings, whichever is more
    (default :data:`SEED_POSTINGS`, :data:`SEED_SHARE`); a query of fewer than ``prune_from`` postings
    (default :data:`PRUNE_FROM_POSTINGS`) is scored whole. ``lookup_share`` and ``block_cost`` (default
    :data:`LOOKUP_SHARE`, :data:`BLOCK_COST`) choose between looking the remaining chunks up in a non-essential
    term's blocks and scoring them whole, and whether skipping pays at all (with ``skip_from_share``, default
    :data:`SKIP_FROM_SHARE`); ``probe_blocks`` bounds the blocks the threshold's full scores look their chunks up
    in (:data:`PROBE_BLOCKS`)."""
    share = LOOKUP_SHARE if lookup_share is None else lookup_share
    per_block = BLOCK_COST if block_cost is None else block_cost
    probe_budget = PROBE_BLOCKS if probe_blocks is None else probe_blocks
    skip_from = SKIP_FROM_SHARE if skip_from_share is None else skip_from_share
    if not refs:
        return PrunedScores(np.zeros(0), 0, 0.0)
    size = max(ref.max_key for ref in refs) + 1
    terms = _terms(refs, scoring)
    total = sum(t.postings for t in terms)
    # Highest bound first (rare terms), fewest postings first among equals.
    by_upper = sorted(terms, key=lambda t: (-t.upper, t.postings))
    budget = max(
        SEED_POSTINGS if seed_postings is None else seed_postings,
        int(total * (SEED_SHARE if seed_share is None else seed_share)),
    )
    if total < (PRUNE_FROM_POSTINGS if prune_from is None else prune_from):
        # Too few postings for skipping to pay for its extra steps: all scored at once, as exhaustively.
        return PrunedScores(_every_posting(terms, await read(refs), scoring, size, dead), total, 0.0, total)
    enough = 2 * max(probe, 2 * k)  # postings enough for the check to find k passing chunks among them
    seed: list[_Term] = []
    held = 0
    for t in by_upper:
        if held >= enough and held + t.postings > budget:
            break
        seed.append(t)
        held += t.postings
    held_blocks: dict[int, ReadBlock] = {}  # every block read by this search, read once (keys decoded once)

    async def read_once(wanted: Sequence[BlockRef]) -> Mapping[int, ReadBlock]:
        missing = [ref for ref in wanted if ref.block_id not in held_blocks]
        if missing:
            held_blocks.update(await read(missing))
        return held_blocks

    impacts: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # term id -> (keys, contributions) in full
    await _score_full(seed, scoring, read_once, impacts)
    partial = _partial(impacts.values(), size, dead)
    threshold = 0.0
    rest = [t for t in by_upper if t.term_id not in impacts]
    if rest:
        best = await _best_passing(partial, k, passing, check, may_pass, probe)
        if len(best) >= k:
            full = await _full_scores(best, partial, _probed(rest, probe_budget), scoring, read_once)
            threshold = float(np.partition(full, len(full) - k)[len(full) - k])
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
    if skippable < skip_from * total or (
        # Chunks certain to remain (their partial score alone reaches the threshold less the non-essential
        # terms' bounds): too many for lookups to pay (a long or common-word query's).
        np.count_nonzero(partial >= cutoff - summed) * len(optional) * share >= skippable
    ):
        # Too little to skip: every posting scored in one pass, as exhaustively (no per-term sums to join).
        blocks = await read_once(refs)
        scores = _every_posting(terms, blocks, scoring, size, dead)
        return PrunedScores(scores, sum(len(block) for block in blocks.values()), 0.0, total)
    optional_ids = {t.term_id for t in optional}
    essential = [t for t in rest if t.term_id not in optional_ids]
    if essential:
        await _score_full(essential, scoring, read_once, impacts)
        partial += _partial((impacts[t.term_id] for t in essential), size, dead)
    scored = sum(len(keys) for keys, _ in impacts.values())  # (the threshold's few lookups not counted)
    # The chunks that can still be among the best: first with every non-essential term at its bound (one
    # pass), then with the bounds of its blocks that hold them.
    alive = partial >= cutoff - summed  # (summed < cutoff: only chunks with a partial score)
    candidates = np.flatnonzero(alive)
    some: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # non-essential term id -> remaining chunks' postings
    skipping = len(candidates) * len(optional) * share < skippable
    if not skipping:
        # Too many chunks left for lookups to pay: the non-essential terms scored in full as well, one sum.
        await _score_full(optional, scoring, read_once, impacts)
        scored += skippable
    else:
        upper = partial[candidates]
        for t in optional:
            upper += _covering_bound(t, candidates)
        alive[candidates[upper < cutoff]] = False
        survivors = np.flatnonzero(alive)
        # Each term's blocks holding a remaining chunk, looked up (few chunks in many postings) or scored whole.
        lookups: list[tuple[_Term, list[BlockRef]]] = []
        whole: list[tuple[_Term, list[BlockRef]]] = []
        for t in optional:
            refs_t, held_t = _blocks_holding(t, survivors)
            if refs_t:  # none: no block of the term holds a chunk that can still enter the top k
                cheaper = held_t * share + len(refs_t) * per_block < sum(r.n for r in refs_t)
                (lookups if cheaper else whole).append((t, refs_t))
        if lookups or whole:
            blocks = await read_once([ref for _, refs_t in lookups + whole for ref in refs_t])
            for wanted, (keys_o, impacts_o, counts_o) in (
                (lookups, _looked_up(lookups, blocks, scoring, survivors.astype(np.int32), alive, share)),
                (whole, _scored(whole, blocks, scoring)),  # the final sum keeps only the remaining chunks
            ):
                if not wanted:
                    continue
                scored += len(keys_o)
                for t, term_keys, term_impacts in _by_term([t for t, _ in wanted], keys_o, impacts_o, counts_o):
                    some[t.term_id] = (term_keys, term_impacts)
    # The exhaustive pass's sums: every contribution of a remaining chunk, in term order (those left out: 0,
    # their sums may lack a skipped term's; only the remaining chunks' are added, few scattered writes).
    parts = [_kept(kv, alive) if skipping else kv for _, kv in sorted({**impacts, **some}.items())]
    keys = np.concatenate([kv[0] for kv in parts]) if parts else np.zeros(0, dtype=np.int64)
    values = np.concatenate([kv[1] for kv in parts]) if parts else np.zeros(0, dtype=np.float32)
    scores = np.bincount(keys, weights=values, minlength=size)
    scores[dead[dead < size]] = 0.0
    return PrunedScores(scores, sum(len(block) for block in held_blocks.values()), threshold, scored)


def _every_posting(
    terms: Sequence[_Term], blocks: Mapping[int, ReadBlock], scoring: Bm25Scoring, size: int, dead: np.ndarray
) -> np.ndarray:
    """The exhaustive pass's scores (every posting of every term, summed in term order) from ``blocks``."""
    in_order = sorted(terms, key=lambda t: t.term_id)
    keys, values, _ = _scored([(t, t.blocks) for t in in_order], blocks, scoring)
    scores = np.bincount(keys, weights=values, minlength=size)
    scores[dead[dead < size]] = 0.0
    return scores


def _terms(refs: Sequence[BlockRef], scoring: Bm25Scoring) -> list[_Term]:
    """The query's terms with their blocks and the blocks' bounds."""
    nan = np.full(6, np.nan)
    bounds = np.array([nan if r.bounds is None else np.asarray(r.bounds, dtype=np.float64) for r in refs])
    weights = np.array([term_weight(scoring, r.df) for r in refs], dtype=np.float32)
    uppers = block_upper_bounds(scoring, weights, bounds)
    grouped: dict[int, list[int]] = {}
    for i, r in enumerate(refs):
        grouped.setdefault(r.term_id, []).append(i)
    terms = []
    for term_id, rows in grouped.items():
        blocks = [refs[i] for i in rows]
        terms.append(_Term(term_id, weights[rows[0]], blocks, uppers[rows], sum(b.n for b in blocks)))
    return terms


async def _score_full(
    terms: Sequence[_Term], scoring: Bm25Scoring, read: ReadBlocks, into: dict[int, tuple[np.ndarray, np.ndarray]]
) -> None:
    """Read every block of ``terms`` and keep each term's keys and contributions (scored in one pass)."""
    blocks = await read([ref for t in terms for ref in t.blocks])
    for t, keys, impacts in _by_term(terms, *_scored([(t, t.blocks) for t in terms], blocks, scoring)):
        into[t.term_id] = (keys, impacts)


def _by_term(
    terms: Sequence[_Term], keys: np.ndarray, impacts: np.ndarray, counts: Sequence[int]
) -> Iterator[tuple[_Term, np.ndarray, np.ndarray]]:
    """A term-after-term result (``counts[i]`` keys and contributions of ``terms[i]``) split by term."""
    cuts = np.cumsum(counts)[:-1]
    return zip(terms, np.split(keys, cuts), np.split(impacts, cuts), strict=True)


def _scored(
    wanted: Sequence[tuple[_Term, Sequence[BlockRef]]], blocks: Mapping[int, ReadBlock], scoring: Bm25Scoring
) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """Every posting of the ``wanted`` blocks of each term, scored in one vectorised pass: keys, contributions
    and the count of each term's, term after term."""
    if any(ref.block_id not in blocks for _, refs in wanted for ref in refs):
        raise BlockVanished
    postings = np.frombuffer(
        b"".join(blocks[ref.block_id].postings for _, refs in wanted for ref in refs), dtype=POSTING
    )
    counts = [sum(len(blocks[ref.block_id]) for ref in refs) for _, refs in wanted]
    return _impacts(wanted, postings, counts, scoring)


def _looked_up(
    wanted: Sequence[tuple[_Term, Sequence[BlockRef]]],
    blocks: Mapping[int, ReadBlock],
    scoring: Bm25Scoring,
    survivors: np.ndarray,
    alive: np.ndarray,
    share: int,
) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """The postings of ``survivors`` (sorted ``int32`` keys; ``alive`` the same as a mask over all keys) in the
    ``wanted`` blocks of each term, scored in one vectorised pass: keys, contributions and the count of each
    term's, term after term (a term's in its blocks' order, as :func:`_scored` gives them). In a block holding
    few of them they are found by binary search in its keys (no other posting decoded); in one holding many,
    by the mask over its keys (one pass, cheaper than that many searches: more than one in ``share``)."""
    found: list[np.ndarray] = []
    counts: list[int] = []
    for _, refs in wanted:
        count = 0
        for ref in refs:
            block = blocks.get(ref.block_id)
            if block is None:
                raise BlockVanished
            low = int(np.searchsorted(survivors, ref.min_key, side="left"))
            want = survivors[low : int(np.searchsorted(survivors, ref.max_key, side="right"))]
            keys = block.keys
            if not len(want) or not len(keys):
                continue
            if len(want) * share > len(keys):
                at = np.flatnonzero(alive[keys])
            else:
                at = np.minimum(np.searchsorted(keys, want), len(keys) - 1)
                at = at[keys[at] == want]
            if len(at):
                found.append(np.take(block.packed, at))  # (indexing records is ~15x slower than take)
                count += len(at)
        counts.append(count)
    postings = np.concatenate(found) if found else np.zeros(0, dtype=POSTING)
    return _impacts(wanted, postings, counts, scoring)


def _impacts(
    wanted: Sequence[tuple[_Term, Sequence[BlockRef]]], postings: np.ndarray, counts: list[int], scoring: Bm25Scoring
) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """``postings`` (``counts[i]`` of the ``i``-th term of ``wanted``, term after term) scored: their keys,
    contributions and the counts."""
    weights = np.repeat(np.array([t.weight for t, _ in wanted], dtype=np.float32), counts)
    return postings["key"].astype(np.int64), posting_impacts(postings, weights, scoring), counts


def _kept(part: tuple[np.ndarray, np.ndarray], alive: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A term's keys and contributions, only those of the ``alive`` chunks."""
    keys, values = part
    keep = alive[keys]
    return keys[keep], values[keep]


def _partial(parts: Iterable[tuple[np.ndarray, np.ndarray]], size: int, dead: np.ndarray) -> np.ndarray:
    """Each chunk's sum of the contributions held so far (a lower bound of its score; 0 for removed chunks)."""
    pairs = list(parts)
    keys = np.concatenate([p[0] for p in pairs])
    values = np.concatenate([p[1] for p in pairs])
    partial = np.bincount(keys, weights=values, minlength=size)
    partial[dead[dead < size]] = 0.0
    return partial


async def _best_passing(
    partial: np.ndarray,
    k: int,
    passing: np.ndarray | None,
    check: CheckKeys | None,
    may_pass: Callable[[int], np.ndarray] | None,
    probe: int,
) -> np.ndarray:
    """Keys of chunks known to pass, of the best partial scores (up to ``max(probe, 2 * k)``, all positive):
    among a resolved filter's chunks (``passing``), or the best partial scores that ``check`` lets through;
    none without either."""
    count = max(probe, 2 * k)
    known: np.ndarray
    if passing is not None:
        known = passing[passing < len(partial)]
        known = known[partial[known] > 0]
        if len(known) > count:
            known = known[np.argpartition(-partial[known], count - 1)[:count]]
        return known
    if check is None:
        return np.zeros(0, dtype=np.int64)
    ranked = partial if may_pass is None else partial * may_pass(len(partial))
    candidates = best_keys(ranked, count)
    if not len(candidates):
        return candidates
    known = np.asarray(await check(candidates), dtype=np.int64)
    passed: np.ndarray = known[partial[known] > 0]
    return passed


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
    keys: np.ndarray, partial: np.ndarray, rest: Sequence[_Term], scoring: Bm25Scoring, read: ReadBlocks
) -> np.ndarray:
    """The scores of ``keys`` over the terms scored so far (``partial``) and ``rest`` (all other terms, or some:
    then a lower bound of their full scores): each key's postings in those terms' blocks whose range holds it,
    looked up by binary search. Summed in another order than the final scores (the threshold's slack covers
    it)."""
    ordered = np.sort(keys)
    wanted = [(t, refs) for t in rest if (refs := _blocks_holding(t, ordered)[0])]
    full: np.ndarray = partial[ordered].astype(np.float64)
    if not wanted:
        return full
    blocks = await read([ref for _, refs in wanted for ref in refs])
    found, contributions, _ = _looked_up(wanted, blocks, scoring, ordered.astype(np.int32), ordered[:0], 0)
    full += np.bincount(np.searchsorted(ordered, found), weights=contributions, minlength=len(ordered))
    return full


def _covering_bound(term: _Term, candidates: np.ndarray) -> np.ndarray:
    """For each of ``candidates`` (sorted keys), the most ``term`` can add to it: the largest bound of the
    term's blocks whose key range holds it (0 where none does)."""
    out = np.zeros(len(candidates))
    lows = np.searchsorted(candidates, [b.min_key for b in term.blocks], side="left")
    highs = np.searchsorted(candidates, [b.max_key for b in term.blocks], side="right")
    for low, high, upper in zip(lows, highs, term.uppers, strict=True):
        if high > low:
            np.maximum(out[low:high], upper, out=out[low:high])
    return out


def _blocks_holding(term: _Term, survivors: np.ndarray) -> tuple[list[BlockRef], int]:
    """The blocks of ``term`` whose key range holds one of ``survivors`` (sorted keys), and how many of them
    their ranges hold (a chunk once per block whose range holds it)."""
    if not len(survivors):
        return [], 0
    lows = np.searchsorted(survivors, [b.min_key for b in term.blocks], side="left")
    highs = np.searchsorted(survivors, [b.max_key for b in term.blocks], side="right")
    holding = highs > lows
    return [b for b, hold in zip(term.blocks, holding, strict=True) if hold], int((highs - lows).sum())
