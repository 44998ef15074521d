"""Offline (extractive) answers on the bundled PubMedQA questions: do the quoted sentences come from the
question's own abstract?

Each of the 500 bundled PQA-L questions (``data/samples/pqal_dev500.json``) is asked of a store holding all
500 abstracts (without titles: most questions are their article's title verbatim). Retrieval is the real
retriever with the configured settings (``EVIDENTIA_*``; ``--model`` overrides the embedding model), the
passages an answer gets are what ``/v1/ask`` hands the synthesizer (top_k 20, top_n 5, the relevance floor),
and the answer is the synthesizer's :class:`ExtractiveAnswerer`. Printed per split:

- answers: questions with a non-empty extractive answer;
- cite own: answers quoting at least one sentence of the question's own abstract;
- sentences / own: quoted sentences, and the share of them from the question's own abstract.

The questions are split in two halves by a seeded shuffle (``--seed``): ``tune`` is where the selection
logic was adjusted, ``report`` is the held-out half. Retrieved passages are kept in ``--hits`` (JSON) so
the answerer can be re-run without the store.

    PYTHONPATH=. python bench/extractive_pubmedqa.py --model bge-small-en-v1.5 --hits /tmp/pqa_hits.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "data" / "samples" / "pqal_dev500.json"


async def retrieve(
    model: str | None, top_k: int, top_n: int, cache_dir: Path | None
) -> dict[str, list[dict[str, Any]]]:
    from evaluation.retrieval import EvalConfig, _encode_queries, indexed_store, load_pubmedqa
    from services.retriever.engine import CorpusStats, SearchEngine
    from shared.models import SearchFilters, relevant_hits
    from shared.settings import EmbeddingSettings, Settings

    settings = Settings()
    if model:
        settings = settings.model_copy(update={"embedding": EmbeddingSettings(model=model)})
    ds = load_pubmedqa(DATA)
    config = EvalConfig(modes=(), cache_dir=cache_dir)
    out: dict[str, list[dict[str, Any]]] = {}
    async with indexed_store(ds, settings, config, lambda m: print(f"# {m}", file=sys.stderr)) as store:
        ids = sorted(ds.queries)
        qvecs = await asyncio.to_thread(
            _encode_queries, store.cache, store.embedder, [ds.queries[q] for q in ids], None
        )
        store.cache.save()
        searcher = SearchEngine.from_settings(
            store.pool, store.index, settings.retrieval, ef_search=settings.database.hnsw_ef_search, stats=CorpusStats()
        )
        floor = settings.relevance_floor
        for i, qid in enumerate(ids):
            result = await searcher.search(
                ds.queries[qid], qvecs[i], mode="hybrid", top_k=top_k, top_n=top_n, filters=SearchFilters()
            )
            hits = relevant_hits(result.hits, floor)  # what the synthesizer may quote
            out[qid] = [h.model_dump(mode="json") for h in hits]
    return out


def split_of(ids: Sequence[str], seed: int) -> dict[str, str]:
    from evaluation.folds import assign_folds

    return {q: ("tune" if f == 0 else "report") for q, f in assign_folds(ids, 2, seed).items()}


def measure(questions: dict[str, str], hits: dict[str, list[dict[str, Any]]], ids: Sequence[str]) -> dict[str, Any]:
    from services.synthesizer.extractive import ExtractiveAnswerer
    from shared.models import SearchHit

    answerer = ExtractiveAnswerer()
    answers = cite_own = sentences = own = own_retrieved = 0
    for qid in ids:
        passages = [SearchHit.model_validate(h) for h in hits[qid]]
        own_retrieved += any(p.source_id == qid for p in passages)
        chosen = answerer.select(questions[qid], passages)
        if not chosen:
            continue
        answers += 1
        mine = sum(c.hit.source_id == qid for c in chosen)
        cite_own += mine > 0
        sentences += len(chosen)
        own += mine
    return {
        "questions": len(ids),
        "own_abstract_retrieved": own_retrieved,
        "answers": answers,
        "answers_citing_own": cite_own,
        "sentences": sentences,
        "sentences_from_own": own,
        "own_share": round(own / sentences, 4) if sentences else 0.0,
        "sentences_per_answer": round(sentences / answers, 2) if answers else 0.0,
    }


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", help="Embedding model (default: EVIDENTIA_EMBEDDING_MODEL).")
    p.add_argument("--hits", type=Path, help="Keep the retrieved passages here (reused when it exists).")
    p.add_argument("--top-k", type=int, default=20)
    p.add_argument("--top-n", type=int, default=5)
    p.add_argument("--seed", type=int, default=0, help="Seed of the tune/report split.")
    p.add_argument("--cache-dir", type=Path, help="Embedding cache (default ~/.cache/evidentia/eval).")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)

    from evaluation.retrieval import default_cache_dir, load_pubmedqa

    ds = load_pubmedqa(DATA)
    if args.hits and args.hits.exists():
        hits = json.loads(args.hits.read_text(encoding="utf-8"))
    else:
        hits = asyncio.run(retrieve(args.model, args.top_k, args.top_n, args.cache_dir or default_cache_dir()))
        if args.hits:
            args.hits.write_text(json.dumps(hits), encoding="utf-8")
    ids = sorted(ds.queries)
    split = split_of(ids, args.seed)
    report = {
        name: measure(ds.queries, hits, [q for q in ids if name == "all" or split[q] == name])
        for name in ("tune", "report", "all")
    }
    if args.json:
        print(json.dumps(report))
        return 0
    print(
        f"{'split':<8} {'questions':>9} {'own retrieved':>13} {'answers':>7} {'cite own':>8} {'sentences':>9} "
        f"{'from own':>8} {'share':>6}"
    )
    for name, r in report.items():
        print(
            f"{name:<8} {r['questions']:>9} {r['own_abstract_retrieved']:>13} {r['answers']:>7} "
            f"{r['answers_citing_own']:>8} {r['sentences']:>9} {r['sentences_from_own']:>8} {r['own_share']:>6.3f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
