"""bge-small FP32 against its int8 export on the CPU: passages/s and how far the int8 vectors move.

    .venv/bin/python bench/int8_cpu.py --models-dir models --passages 200 --threads 2 --rounds 3 [--json]

Both models encode the same PubMed abstracts (``data/samples/pubmedqa500.jsonl``, title + abstract, truncated at
512 tokens as the embedder does), from token ids, in length-sorted batches (the embedder's path). Rounds
alternate the two models, so load from other work on a shared machine falls on both alike; the best round of
each is reported, and the ratio of the two. Then the int8 vectors are compared with the FP32 ones (cosine,
min and median) and by the top-10 neighbours each abstract's title finds among the abstracts (overlap). That is
a closeness check, not retrieval quality: the held-out fold protocol (``evidentia eval``) measures that.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from shared.embedding import clear_cache, get_embedder
from shared.embedding.base import Embedder
from shared.settings import EmbeddingSettings

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "samples" / "pubmedqa500.jsonl"
MODELS = ("bge-small-en-v1.5", "bge-small-en-v1.5-q")


def load_texts(limit: int) -> tuple[list[str], list[str]]:
    """(passages, their titles as queries) of the first ``limit`` sample abstracts."""
    rows = [json.loads(line) for line in SAMPLE.read_text().split("\n") if line.strip()][:limit]
    return [f"{r['title']}\n{r['abstract']}" for r in rows], [r["title"] for r in rows]


def rate(embedder: Embedder, ids: list[list[int]], batch: int) -> float:
    start = time.perf_counter()
    embedder.encode_pretokenized(ids, batch)
    return len(ids) / (time.perf_counter() - start)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models-dir", required=True)
    p.add_argument("--passages", type=int, default=200)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    passages, titles = load_texts(args.passages)
    clear_cache()
    embedders = {
        m: get_embedder(
            EmbeddingSettings(
                model=m, device="cpu", threads=args.threads, batch_size=args.batch, models_dir=args.models_dir
            )
        )
        for m in MODELS
    }
    ids = {m: e.passage_token_ids(passages) for m, e in embedders.items()}
    best = dict.fromkeys(MODELS, 0.0)
    for _ in range(args.rounds):
        for m, e in embedders.items():
            best[m] = max(best[m], rate(e, ids[m], args.batch))
    fp32, int8 = (embedders[m].encode_pretokenized(ids[m], args.batch) for m in MODELS)
    cos = (fp32 * int8).sum(axis=1)
    q32, q8 = (embedders[m].encode_queries(titles) for m in MODELS)
    top32 = np.argsort(-(q32 @ fp32.T), axis=1)[:, :10]
    top8 = np.argsort(-(q8 @ int8.T), axis=1)[:, :10]
    overlap = float(np.mean([len(set(a) & set(b)) / 10 for a, b in zip(top32, top8, strict=True)]))
    own32 = float(np.mean(top32[:, 0] == np.arange(len(titles))))
    own8 = float(np.mean(top8[:, 0] == np.arange(len(titles))))
    out = {
        "passages": len(passages),
        "threads": args.threads,
        "batch": args.batch,
        "passages_per_s": {m: round(best[m], 2) for m in MODELS},
        "int8_speedup": round(best[MODELS[1]] / best[MODELS[0]], 2),
        "cosine_int8_vs_fp32": {"min": round(float(cos.min()), 4), "median": round(float(np.median(cos)), 4)},
        "top10_overlap": round(overlap, 3),
        "title_finds_own_abstract_first": {MODELS[0]: round(own32, 3), MODELS[1]: round(own8, 3)},
    }
    print(json.dumps(out) if args.json else json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
