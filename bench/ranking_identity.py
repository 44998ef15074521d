"""Per-question ranked ids of the real searcher on a SciFact subset, for proving a refactor changes no ranking.

    nice -n 5 .venv/bin/python -m bench.ranking_identity --out /tmp/before.json
    ... refactor ...
    nice -n 5 .venv/bin/python -m bench.ranking_identity --out /tmp/after.json
    cmp /tmp/before.json /tmp/after.json

The subset is the first ``--queries`` questions of the train split and a corpus of their judged documents plus
the first ``--corpus`` documents. Every question runs through :func:`evaluation.retrieval.evaluate` (the parser's
chunker and store, a fresh index in a throw-away PostgreSQL, the real searcher) in the lexical, dense and hybrid
modes, plus hybrid variants with dense feedback on and with reciprocal rank fusion. The dense leg reads a deterministic
hashing embedder (each word hashed to one of ``DIM`` signed coordinates, L2-normalised) instead of a model:
cheap on two cores, and a refactor of the searcher changes none of its vectors.

The vector table gets no ANN index (an IVFFlat setting whose training is skipped), so the dense leg is exact
and its ties come in the table's order: pgvector builds an HNSW graph with random levels, so two builds of the
same vectors can order near-ties (which the hashing embedder makes common) differently, and the rankings
of two runs of the same code would differ.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

DIM = 64
_WORD = re.compile(r"[a-z0-9]+")


class HashingEmbedder:
    """Bag of hashed words: deterministic, model-free vectors for the dense leg."""

    name = "hashing-64"
    dim = DIM
    query_prefix = ""

    def _encode(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), DIM), dtype=np.float32)
        for i, text in enumerate(texts):
            for word in _WORD.findall(text.lower()):
                h = int.from_bytes(hashlib.blake2b(word.encode(), digest_size=4).digest(), "little")
                out[i, h % DIM] += 1.0 if (h >> 16) & 1 else -1.0
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.where(norms == 0, 1.0, norms)

    def encode_passages(self, texts: Sequence[str], batch_size: int | None = None) -> np.ndarray:
        return self._encode(texts)

    def encode_queries(self, texts: Sequence[str], batch_size: int | None = None) -> np.ndarray:
        return self._encode([self.query_prefix + t for t in texts])


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", default="../shared/data/beir_scifact")
    p.add_argument("--split", default="train")
    p.add_argument("--queries", type=int, default=150)
    p.add_argument("--corpus", type=int, default=800)
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)

    import shared.embedding
    from evaluation import retrieval
    from shared.settings import Settings

    full = retrieval.load_beir(args.dataset, args.split)
    qids = sorted(full.queries)[: args.queries]
    judged = {d for q in qids for d in full.qrels[q]}
    keep = [d for d in full.corpus if d in judged] + [d for d in list(full.corpus)[: args.corpus] if d not in judged]
    ds = retrieval.Dataset(
        f"{full.name}-subset",
        {d: full.corpus[d] for d in keep},
        {q: full.queries[q] for q in qids},
        {q: full.qrels[q] for q in qids},
    )
    embedder = HashingEmbedder()
    shared.embedding.get_embedder = lambda _settings=None: embedder  # type: ignore[assignment]
    runs: dict[str, dict[str, list[str]]] = {}
    run_mode = retrieval._run_mode

    async def capture(*a: Any, **kw: Any) -> retrieval.Run:
        run = await run_mode(*a, **kw)
        label = f"run{len(runs)}"
        runs[label] = {q: [d for d, _ in sorted(s.items(), key=lambda kv: -kv[1])] for q, s in sorted(run.items())}
        return run

    retrieval._run_mode = capture  # type: ignore[assignment]

    async def no_ann_index(*_a: Any, **_kw: Any) -> None:
        return None

    retrieval.maintain_ann_index = no_ann_index  # type: ignore[assignment]
    settings = Settings()
    settings = settings.model_copy(
        update={"database": settings.database.model_copy(update={"vector_index": "ivfflat"})}
    )
    config = retrieval.EvalConfig(
        modes=("bm25", "dense", "hybrid"),
        cache_dir=None,
        concurrency=2,
        variants={
            "prf": {"mode": "hybrid", "prf_docs": 3},
            "rrf": {"mode": "hybrid", "fusion": "rrf"},
        },
    )
    report = asyncio.run(retrieval.evaluate(ds, settings, config, lambda m: print(f"# {m}", file=sys.stderr)))
    labels = [r.mode for r in report.results]
    out = {label: runs[f"run{i}"] for i, label in enumerate(labels)}
    Path(args.out).write_text(json.dumps(out, indent=0, sort_keys=True) + "\n", encoding="utf-8")
    for r in report.results:
        print(f"{r.mode:<14} " + "  ".join(f"{k} {v:.4f}" for k, v in r.metrics.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
