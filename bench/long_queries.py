"""Long and common-word lexical queries, pruned against exhaustive (``bench/scale.py`` rows).

Three query sets on the store as it stands: the benchmark's ordinary questions, queries of 200 distinct terms
(the analysed terms of several of the corpus's abstracts, in their order: what pasting a long text as a query
gives), and the query of the 50 most frequent terms of the index (the worst case for skipping: every term is
in a large share of the chunks, none has a high bound). Each runs through the lexical leg as the retriever runs
it (``bm25_search``, k = 20, the retriever's postings cache, no filter), with pruning and without on each
query in turn (the order turned every round; with the scoring split across threads, the exhaustive leg on
one thread as well), one search at a time: p50 / p95 wall milliseconds, the CPU
seconds of this process per search (the retriever's share; PostgreSQL's is not in it), and the postings read a
search. Every search's hits are compared between the two: a difference stops the run.

    python bench/long_queries.py --database-url postgresql://... [--rounds 20]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

#: Analysed terms in a long query.
LONG_TERMS = 200

#: Terms in the common-word query.
COMMON_TERMS = 50


async def long_query_texts(pool: Any, abstracts: list[str], count: int, terms: int = LONG_TERMS) -> list[str]:
    """``count`` queries of ``terms`` distinct analysed terms each: the lexemes of consecutive abstracts in the
    order they first occur (lexemes analyse to themselves, so the query has exactly those terms)."""
    out: list[str] = []
    i = 0
    while len(out) < count and i < len(abstracts):
        seen: list[str] = []
        while len(seen) < terms and i < len(abstracts):
            rows = await pool.fetch(
                "SELECT lexeme FROM unnest(to_tsvector('english', $1::text)) ORDER BY positions[1]", abstracts[i]
            )
            for r in rows:
                if r["lexeme"] not in seen:
                    seen.append(r["lexeme"])
            i += 1
        if len(seen) >= terms:
            text = " ".join(seen[:terms])
            analysed = await pool.fetchval("SELECT length(to_tsvector('english', $1::text))", text)
            if analysed == terms:  # a lexeme that analyses to another term is not kept
                out.append(text)
    return out


async def common_query_text(pool: Any, terms: int = COMMON_TERMS) -> str:
    """The ``terms`` terms of the highest document frequency, as one query."""
    rows = await pool.fetch("SELECT term FROM bm25_terms ORDER BY df DESC, term LIMIT $1", terms)
    return " ".join(r["term"] for r in rows)


async def compare(pool: Any, sets: dict[str, list[str]], rounds: int, k: int = 20) -> dict[str, Any]:
    """Each query set, pruned and exhaustive: latency, CPU and postings read per search (see the module)."""
    from services.retriever.engine.lexical.postings_cache import PostingsCache
    from services.retriever.engine.lexical.rank import Bm25Params, PostingsTally, bm25_search
    from services.retriever.engine.lexical.stats import CorpusStats
    from shared.models import SearchFilters
    from shared.settings import Settings

    settings = Settings().retrieval
    cache = PostingsCache.from_settings(settings)
    stats = CorpusStats()
    base = Bm25Params.from_settings(settings)
    modes = {"pruned": replace(base, pruning=True), "exhaustive": replace(base, pruning=False)}
    if base.threads > 1:  # what splitting the sums across threads gives, measured beside it
        modes["exhaustive, 1 thread"] = replace(base, pruning=False, threads=1)
    out: dict[str, Any] = {}
    for name, queries in sets.items():
        for q in queries:  # warm: the cache holds what the searches read
            for params in modes.values():
                await bm25_search(pool, q, k, SearchFilters(), params, stats, cache=cache)
        tallies = {label: PostingsTally() for label in modes}
        wall: dict[str, list[float]] = {label: [] for label in modes}
        cpu: dict[str, list[float]] = {label: [] for label in modes}
        for r in range(rounds):
            for q in queries:
                # The ways one after the other on each query, their order turned every round: a machine whose
                # speed drifts (a shared VM's does, by a third within minutes) then slows all alike.
                got: dict[str, Any] = {}
                labels = list(modes)
                for label in labels[r % len(labels) :] + labels[: r % len(labels)]:
                    c0, t0 = time.process_time(), time.perf_counter()
                    got[label] = await bm25_search(
                        pool, q, k, SearchFilters(), modes[label], stats, cache=cache, tally=tallies[label]
                    )
                    wall[label].append(time.perf_counter() - t0)
                    cpu[label].append(time.process_time() - c0)
                if any(hits != got["exhaustive"] for hits in got.values()):
                    raise SystemExit(f"{name}: the hits differ between {list(got)} ({q[:60]!r})")
        for label, tally in tallies.items():
            out.setdefault(name, {})[label] = {
                "queries": len(queries),
                "searches": len(wall[label]),
                "p50_ms": round(1000 * float(np.percentile(wall[label], 50)), 1),
                "p95_ms": round(1000 * float(np.percentile(wall[label], 95)), 1),
                "cpu_ms_per_search": round(1000 * float(np.mean(cpu[label])), 2),
                "postings_read_per_search": round(tally.postings / max(tally.searches, 1)),
                "postings_scored_per_search": round(tally.scored / max(tally.searches, 1)),
            }
            print(f"    lexical {name:<22} {label:<10} {out[name][label]}", flush=True)
        out[name]["same_hits"] = True
    return out


async def long_queries(pool: Any, questions: list[str], abstracts: list[str], rounds: int) -> dict[str, Any]:
    """The three query sets of the module, compared."""
    sets = {
        "questions": questions,
        f"{LONG_TERMS} terms": await long_query_texts(pool, abstracts, 10),
        f"{COMMON_TERMS} most frequent": [await common_query_text(pool)],
    }
    return await compare(pool, sets, rounds)


async def _main(url: str, rounds: int) -> None:
    import json

    sys.path.insert(0, str(ROOT / "bench"))
    from scale import load_source

    from shared.db import create_pool
    from shared.settings import DatabaseSettings

    source = load_source(None)
    pool = await create_pool(DatabaseSettings.model_validate({"EVIDENTIA_DATABASE_URL": url}))
    try:
        texts = [f"{a.title} {' '.join(a.sentences)}" for a in source.abstracts]
        print(json.dumps(await long_queries(pool, source.queries[:60], texts, rounds), indent=2))
    finally:
        await pool.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--rounds", type=int, default=20)
    a = parser.parse_args()
    asyncio.run(_main(a.database_url, a.rounds))
