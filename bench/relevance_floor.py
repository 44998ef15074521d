"""Each embedding model's relevance floor, at the operating point of all-MiniLM-L6-v2's 0.2 (issue #17).

``EVIDENTIA_RETRIEVAL_MIN_SCORE`` decides which passages count as evidence (``shared.models.relevant_hits``: dense
cosine at or above it); an answer with none says the evidence is insufficient. Cosine ranges differ by model:
bge-small-en-v1.5 scores a random SciFact question-passage pair about 0.56, all-MiniLM-L6-v2 about 0.10, so
MiniLM's 0.2 would let every bge passage through. This measures, on a BEIR set's questions against every
chunk of its corpus (the retrieval harness's store and embedding cache):

- the share of all (question, chunk) pairs at or above the reference floor with the reference model;
- for each other model, the floor with the same share (the quantile), and at that floor the share of the
  relevant documents (their best chunk) that pass and of the non-relevant chunks among the first 20.

    PYTHONPATH=. python bench/relevance_floor.py --dataset ../shared/data/beir_scifact \\
        --models all-MiniLM-L6-v2,bge-small-en-v1.5,e5-small-v2 [--floor 0.2] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Sequence
from typing import Any

import numpy as np

from evaluation.retrieval import Dataset, load_dataset, model_vectors


async def similarities(ds: Dataset, model: str, query_ids: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """Cosine of every question with every chunk (questions x chunks), and each chunk's document id."""
    async with model_vectors(ds, model, query_ids) as mv:
        return mv.queries @ mv.passages.T, np.array(mv.doc_ids)


def operating_point(
    sims: np.ndarray, docs: np.ndarray, ds: Dataset, query_ids: Sequence[str], floor: float
) -> dict[str, float]:
    relevant, near_misses = [], []
    for i, q in enumerate(query_ids):
        relevant += [float(sims[i][docs == d].max()) for d in ds.qrels[q] if (docs == d).any()]
        near_misses += [float(sims[i, j]) for j in np.argsort(-sims[i])[:20] if docs[j] not in ds.qrels[q]]
    return {
        "floor": round(floor, 3),
        "all_pairs_passing": round(float((sims >= floor).mean()), 4),
        "relevant_passing": round(float((np.array(relevant) >= floor).mean()), 4),
        "top20_non_relevant_passing": round(float((np.array(near_misses) >= floor).mean()), 4),
    }


async def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", required=True)
    p.add_argument("--split", default="train")
    p.add_argument("--models", default="all-MiniLM-L6-v2,bge-small-en-v1.5,e5-small-v2", help="Reference first.")
    p.add_argument("--floor", type=float, default=0.2, help="The reference model's floor.")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    ds = load_dataset(args.dataset, args.split)
    query_ids = sorted(ds.queries)
    models = [m for m in args.models.split(",") if m]
    out: dict[str, Any] = {"dataset": ds.name, "reference": models[0], "models": {}}
    share = 0.0
    for i, model in enumerate(models):
        sims, docs = await similarities(ds, model, query_ids)
        if i == 0:
            floor = args.floor
            share = float((sims >= floor).mean())
        else:
            floor = float(np.quantile(sims, 1 - share))
        out["models"][model] = operating_point(sims, docs, ds, query_ids, floor)
        if not args.json:
            print(model, out["models"][model], flush=True)
    if args.json:
        print(json.dumps(out))
    return out


if __name__ == "__main__":
    asyncio.run(main())
