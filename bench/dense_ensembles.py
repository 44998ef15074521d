"""Dense ensembles, chunk aggregation and fusion settings under issue #17's fold protocol.

Is a second (or third) embedding model worth its cost? This runs, for SciFact (or any BEIR set), one ranking
per *leg* and fuses the legs offline, so that many combinations are measured without a store per combination:

- the lexical leg is the product's BM25 (``SearchEngine.lexical_search`` over a store built by the retrieval
  harness: the parser's chunker and ``store_document``, so the store's own postings);
- each dense leg is exact cosine over every chunk of that model's store (the chunker follows the model's
  window, as in the product), with the vectors and query vectors of the harness's embedding cache
  (``~/.cache/evidentia/eval``; a model not cached there is encoded, which takes CPU-minutes).

A leg ranks *documents*: a document's score is its best chunk's (``--aggregate max``, what the product does
with ``max_chunks_per_document=1``) or a decayed sum of its chunks' scores, best first (``decay<g>``:
``s1 + g*s2 + g^2*s3 ...``). Fusion is the product's own: ``ReciprocalRankFusion`` / ``ConvexFusion`` of
``services.retriever.fusion`` over the legs' top ``--depth`` documents.

Every candidate (a leg alone, or a fusion of legs with its settings) is scored per question and the fold
protocol (``evaluation.folds.cross_validate``) chooses among them on four fifths and reports the fifth. The
first candidate listed is the shipped default's setting (ties go to it).

Fusing documents instead of chunks differs from the product's chunk-level fusion only where a document has
several chunks (all-MiniLM-L6-v2 splits most SciFact abstracts in two); the single-model rows are printed
next to the harness's figures in ``docs/benchmarks.md`` so the difference is visible.

    PYTHONPATH=. python bench/dense_ensembles.py --dataset ../shared/data/beir_scifact --split train \\
        --models bge-small-en-v1.5,e5-small-v2,all-MiniLM-L6-v2 [--folds 5] [--json] [--out FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from evaluation.folds import cross_validate
from evaluation.retrieval import Dataset, load_dataset, model_vectors, per_query_metrics
from services.retriever.engine import CorpusStats, SearchEngine
from services.retriever.engine.ranking.fusion import ConvexFusion, ReciprocalRankFusion
from shared.models import SearchFilters

Ranking = list[tuple[str, float]]
"""documents best first, with the leg's score"""
Leg = dict[str, Ranking]
"""question id -> ranking"""

SHORT = {"bge-small-en-v1.5": "bge", "e5-small-v2": "e5", "all-MiniLM-L6-v2": "minilm"}


def aggregate(chunk_scores: Sequence[tuple[str, float]], decay: float, depth: int) -> Ranking:
    """Documents ranked by their chunks' scores: the best chunk's (decay 0) or a decayed sum, best first."""
    per_doc: dict[str, list[float]] = {}
    for doc, s in chunk_scores:
        per_doc.setdefault(doc, []).append(s)
    scored = []
    for doc, scores in per_doc.items():
        scores.sort(reverse=True)
        scored.append((doc, sum(s * decay**i for i, s in enumerate(scores)) if decay else scores[0]))
    scored.sort(key=lambda ds: -ds[1])
    return scored[:depth]


def fuse(legs: Sequence[Ranking], how: str, weights: Sequence[float], rrf_k: int = 60) -> Ranking:
    if how == "rrf":
        return ReciprocalRankFusion(rrf_k, weights).fuse([[d for d, _ in leg] for leg in legs])
    return ConvexFusion(weights).fuse(legs)


async def model_legs(
    ds: Dataset, model: str, query_ids: Sequence[str], depth: int, decays: Sequence[float], lexical: bool
) -> dict[str, Leg]:
    """The dense leg of ``model`` (per decay) and, when asked, the product BM25 leg over the same store."""
    out: dict[str, Leg] = {}
    t = time.perf_counter()
    async with model_vectors(ds, model, query_ids, lambda m: print(f"[{model}] {m}", file=sys.stderr)) as mv:
        passages, queries, st = mv.passages, mv.queries, mv.store
        print(f"[{model}] vectors {passages.shape} in {time.perf_counter() - t:.1f}s", file=sys.stderr)
        docs = mv.doc_ids
        sims = queries @ passages.T
        keep = min(sims.shape[1], depth * 8)
        name = SHORT.get(model, model)
        for decay in decays:
            leg: Leg = {}
            for i, q in enumerate(query_ids):
                top = np.argpartition(-sims[i], keep - 1)[:keep]
                leg[q] = aggregate([(docs[j], float(sims[i, j])) for j in top], decay, depth)
            out[name if not decay else f"{name}~{decay:g}"] = leg
        if lexical:
            searcher = SearchEngine.from_settings(
                st.pool, st.index, mv.settings.retrieval, stats=CorpusStats(ttl_s=1e9)
            )
            doc_of = dict(zip(mv.chunk_ids, mv.doc_ids, strict=True))
            filters = SearchFilters()
            for decay in decays:
                out[f"bm25[{name}]" if not decay else f"bm25[{name}]~{decay:g}"] = {}
            for q in query_ids:
                hits = await searcher.lexical_search(ds.queries[q], depth * 4, filters)
                scored = [(doc_of[h.chunk_id], h.score) for h in hits]
                for decay in decays:
                    key = f"bm25[{name}]" if not decay else f"bm25[{name}]~{decay:g}"
                    out[key][q] = aggregate(scored, decay, depth)
    return out


@dataclass(frozen=True)
class Candidate:
    """One setting: its legs and how they are fused (a single leg is taken as it is)."""

    legs: tuple[str, ...]
    how: str = "rrf"
    weights: tuple[float, ...] = ()
    rrf_k: int = 60

    def ranking(self, legs: Mapping[str, Leg], q: str) -> Ranking:
        if len(self.legs) == 1:
            return legs[self.legs[0]][q]
        weights = self.weights or (1.0,) * len(self.legs)
        return fuse([legs[n][q] for n in self.legs], self.how, weights, self.rrf_k)


def candidates(dense: Sequence[str], decays: Sequence[float]) -> dict[str, Candidate]:
    """Every setting measured: each leg alone, and fusions of one or more dense legs with the BM25 leg of the
    first one's chunking (the product stores one chunking: its model's); then the chunk aggregations."""
    out: dict[str, Candidate] = {}
    for name in dense:
        out[f"bm25[{name}]"] = Candidate((f"bm25[{name}]",))
        out[name] = Candidate((name,))
    for r in range(1, len(dense) + 1):
        for combo in itertools.combinations(dense, r):
            names = (*combo, f"bm25[{combo[0]}]")
            tag = "+".join(combo)
            for k in (60, 20):
                out[f"rrf{k} {tag}+bm25"] = Candidate(names, "rrf", (), k)
            for lw in (0.3, 0.4, 0.5):
                w = (*[(1 - lw) / len(combo)] * len(combo), lw)
                out[f"convex{lw:g} {tag}+bm25"] = Candidate(names, "convex", w)
            if r > 1:
                out[f"convex {tag} (dense only)"] = Candidate(combo, "convex")
    for m in dense:
        for decay in decays:
            if decay:
                d, lx = f"{m}~{decay:g}", f"bm25[{m}]~{decay:g}"
                out[d], out[lx] = Candidate((d,)), Candidate((lx,))
                out[f"rrf60 {d}+bm25~{decay:g}"] = Candidate((d, lx))
    return out


async def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", required=True)
    p.add_argument("--split", default="train")
    p.add_argument("--models", default="bge-small-en-v1.5,e5-small-v2,all-MiniLM-L6-v2")
    p.add_argument("--depth", type=int, default=100, help="Documents each leg contributes to a fusion.")
    p.add_argument("--decay", default="0,0.1,0.3", help="Chunk aggregation: 0 = best chunk, else decayed sum.")
    p.add_argument("--folds", type=int, default=5)
    p.add_argument("--fold-seed", type=int, default=0)
    p.add_argument("--default", default="rrf60 minilm+bm25", help="The shipped setting, listed first.")
    p.add_argument("--json", action="store_true")
    p.add_argument("--out", type=Path, help="Write the JSON here as well.")
    args = p.parse_args(argv)

    ds = load_dataset(args.dataset, args.split)
    query_ids = sorted(ds.queries)
    models = [m for m in args.models.split(",") if m]
    decays = [float(d) for d in args.decay.split(",")]
    legs: dict[str, Leg] = {}
    for model in models:
        legs |= await model_legs(ds, model, query_ids, args.depth, decays, lexical=True)
    dense = [SHORT.get(m, m) for m in models]
    cands = candidates(dense, decays)
    if args.default in cands:
        cands = {args.default: cands[args.default], **{k: v for k, v in cands.items() if k != args.default}}
    qrels = {q: ds.qrels[q] for q in query_ids}
    per_query = {}
    for name, cand in cands.items():
        run = {}
        for q in query_ids:
            ranking = cand.ranking(legs, q)
            run[q] = {d: float(len(ranking) - i) for i, (d, _) in enumerate(ranking)}
        per_query[name] = per_query_metrics(qrels, run)
    cv = cross_validate(per_query, args.folds, args.fold_seed)
    result = {"dataset": ds.name, "models": models, "depth": args.depth, **cv.as_dict()}
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))
    if args.json:
        print(json.dumps(result))
    else:
        rows = sorted(cv.candidates, key=lambda c: -cv.fixed[c]["nDCG@10"].mean)
        print(
            f"{ds.name}: {cv.queries} questions, {cv.folds} folds (seed {cv.seed}); held-out nDCG@10 mean ± std, train"
        )
        for c in rows:
            s = cv.fixed[c]["nDCG@10"]
            print(f"  {c:45s} {s.mean:.4f} ± {s.std:.4f}   train {cv.train[c]['nDCG@10']:.4f}")
        t = cv.tuned["nDCG@10"]
        print(f"tuned (chosen on the other folds): {t.mean:.4f} ± {t.std:.4f}; chosen per fold {cv.chosen}")
        print(f"chosen on all questions: {cv.final_choice}")
    return result


if __name__ == "__main__":
    asyncio.run(main())
