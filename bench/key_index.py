"""Finding chunks in a common term: the key index (a bitmap with a rank directory) against a binary search.

    python bench/key_index.py [--space 3000000] [--postings 1000000] [--needles 30000] [--rounds 20]

A pruned search looks its remaining chunks (``--needles``, sorted) up in a common term of ``--postings`` keys
drawn from ``--space``: :meth:`~services.retriever.engine.lexical.blocks.KeyIndex.lookup` and
:func:`~services.retriever.engine.lexical.blocks.located` (``numpy.searchsorted``) on the same random keys
(seeded). Prints the build time of the index, ms a lookup of the needles each way (best of ``--rounds``) and the
index's bytes against the view's.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from services.retriever.engine.lexical.blocks import POSTING, KeyIndex, located


def _best_ms(run: Callable[[], object], rounds: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return 1000 * best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--space", type=int, default=3_000_000)
    parser.add_argument("--postings", type=int, default=1_000_000)
    parser.add_argument("--needles", type=int, default=30_000)
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    rng = np.random.default_rng(38)
    keys = np.sort(rng.choice(args.space, args.postings, replace=False)).astype(np.int32)
    needles = np.sort(rng.choice(args.space, args.needles, replace=False)).astype(np.int64)
    start = time.perf_counter()
    index = KeyIndex(keys)
    build = 1000 * (time.perf_counter() - start)
    held, at = index.lookup(needles)
    found, there = located(keys, needles.astype(np.int32))
    assert np.array_equal(held, there) and np.array_equal(at, found[there])
    indexed = _best_ms(lambda: index.lookup(needles), args.rounds)
    searched = _best_ms(lambda: located(keys, needles.astype(np.int32)), args.rounds)
    view = args.postings * (POSTING.itemsize + 8)
    print(f"{args.needles:,} keys in a term of {args.postings:,} of {args.space:,}:")
    print(f"  key index: {indexed:.2f} ms (built in {build:.1f} ms, {index.held_bytes:,} bytes, view {view:,})")
    print(f"  binary search: {searched:.2f} ms")


if __name__ == "__main__":
    main()
