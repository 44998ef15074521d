"""BM25 quality and latency at scale: a BEIR data set's corpus added to a store built by ``bench/scale.py``.

    python bench/scale_quality.py --root /tmp/scale/store --dataset ../shared/data/beir_scifact

SciFact's judgements only cover SciFact's 5,183 abstracts. Here the abstracts (one chunk each) join the scale
store's recombined chunks (every one a non-relevant distractor, made of the same corpus's sentences, so they
compete for the same terms), and every query runs lexically (``bm25_search``, k = 100, as the retriever runs
it): nDCG@10/Recall@100/MRR@10 of exact BM25 among the distractors, and the time each query took.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
for _p in (ROOT, ROOT / "bench"):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

from load import free_port, percentile  # noqa: E402


async def run(url: str, dataset: Path, split: str, limit: int | None) -> dict[str, Any]:
    from evaluation.retrieval import compute_metrics, load_beir
    from services.parser.store import store_document
    from services.retriever.engine import CorpusStats
    from services.retriever.engine.lexical.rank import Bm25Params, bm25_search
    from shared.db import create_pool
    from shared.models import Chunk, ParsedDocument, SearchFilters
    from shared.settings import DatabaseSettings, RetrievalSettings

    ds = load_beir(dataset, split)
    pool = await create_pool(DatabaseSettings.model_validate({"EVIDENTIA_DATABASE_URL": url}))
    try:
        have = int(await pool.fetchval("SELECT count(*) FROM documents WHERE source_id LIKE 'beir-%'"))
        if have < len(ds.corpus):
            t = time.perf_counter()
            for doc_id, (title, text) in ds.corpus.items():
                body = text or title
                await store_document(
                    pool,
                    ParsedDocument(
                        source="pubmed",
                        source_id=f"beir-{doc_id}",
                        title=title,
                        abstract=text or None,
                        chunks=[
                            Chunk(
                                section="Abstract",
                                ordinal=0,
                                text=body,
                                token_count=1,
                                char_start=0,
                                char_end=len(body),
                            )
                        ],
                    ),
                )
            print(f"stored {len(ds.corpus)} abstracts in {time.perf_counter() - t:.0f}s", flush=True)
        chunks = int(await pool.fetchval("SELECT count(*) FROM chunks"))
        base = RetrievalSettings()
        qids = sorted(ds.queries)[:limit] if limit else sorted(ds.queries)
        out: dict[str, Any] = {"chunks": chunks, "queries": len(qids)}
        params = Bm25Params(base.bm25_k1, base.bm25_b, base.bm25_title_weight, base.bm25_section_weight)
        stats = CorpusStats(ttl_s=1e9)
        run: dict[str, dict[str, float]] = {}
        took: list[float] = []
        for q in qids:
            t = time.perf_counter()
            hits = await bm25_search(pool, ds.queries[q], 100, SearchFilters(), params, stats)
            took.append((time.perf_counter() - t) * 1000)
            ranked: dict[str, float] = {}
            for rank, h in enumerate(hits):
                doc = h.chunk_id.split("#", 1)[0].removeprefix("pubmed:")
                if doc.startswith("beir-"):
                    ranked.setdefault(doc.removeprefix("beir-"), float(100 - rank))
                else:
                    ranked.setdefault(doc, float(100 - rank))  # a distractor: judged non-relevant
            run[q] = ranked
        metrics, _ = compute_metrics({q: ds.qrels[q] for q in qids}, run)
        out["exact"] = {
            **{k: round(v, 4) for k, v in metrics.items()},
            "p50_ms": round(percentile(took, 50), 1),
            "p95_ms": round(percentile(took, 95), 1),
            "p99_ms": round(percentile(took, 99), 1),
        }
        print(f"exact: {out['exact']}", flush=True)
        return out
    finally:
        await pool.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--root", required=True, help="The --root of a bench/scale.py run (its PostgreSQL).")
    p.add_argument("--dataset", required=True, help="BEIR folder (corpus, queries, qrels).")
    p.add_argument("--split", default="train")
    p.add_argument("--limit", type=int, default=None, help="First N queries only.")
    p.add_argument("--json-out", type=Path, default=None)
    args = p.parse_args(argv)
    from devstack.postgres import LocalPostgres

    pg = LocalPostgres(Path(args.root) / "postgres", port=free_port())
    pg.start()
    try:
        result = asyncio.run(run(pg.url, Path(args.dataset), args.split, args.limit))
    finally:
        pg.stop()
    if args.json_out:
        args.json_out.write_text(json.dumps(result, indent=2))
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
