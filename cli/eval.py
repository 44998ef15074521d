"""``evidentia eval retrieval``: nDCG@10, Recall@100 and MRR@10 of the real retriever on a BEIR data set.

    evidentia eval retrieval --dataset ../shared/data/beir_scifact --split train --mode hybrid [--json]

``--dataset`` is a BEIR folder (``corpus.jsonl[.gz]``, ``queries.jsonl`` or ``queries.SPLIT.jsonl``,
``qrels/SPLIT.tsv``) or a PubMedQA ``pqal_*.json`` (each question's own abstract among all of them).
``--mode`` may be repeated, or ``all``. The corpus is loaded into a fresh index in its own database
(a throw-away PostgreSQL, or a new database on ``--database-url``); the model and every retrieval setting
come from the environment (``EVIDENTIA_EMBEDDING_MODEL``, ``EVIDENTIA_RETRIEVAL_*``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

MODE_CHOICES = ("bm25", "dense", "hybrid", "hybrid+rerank", "all")


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("eval", help="Evaluate retrieval on a benchmark (BEIR format, PubMedQA).")
    sub = p.add_subparsers(dest="eval_command", metavar="WHAT")
    r = sub.add_parser("retrieval", help="nDCG@10, Recall@100, MRR@10 of each search mode.")
    r.add_argument("--dataset", required=True, help="BEIR folder, or a PubMedQA pqal_*.json file.")
    r.add_argument("--split", default="test", help="qrels/SPLIT.tsv (default test).")
    r.add_argument(
        "--mode",
        action="append",
        choices=MODE_CHOICES,
        help="bm25, dense, hybrid, hybrid+rerank or all; repeatable (default hybrid).",
    )
    r.add_argument("--json", action="store_true", help="Print one JSON object.")
    r.add_argument(
        "--database-url",
        help="Create (and drop) a fresh database on this server instead of a throw-away PostgreSQL in a temp dir.",
    )
    r.add_argument("--model", help="Embedding model (default: EVIDENTIA_EMBEDDING_MODEL).")
    r.add_argument("--rerank-depth", type=int, default=30, help="Candidates reranked in hybrid+rerank (top_k).")
    r.add_argument(
        "--rerank-model",
        help="hybrid+rerank with a second embedding model when no cross-encoder "
        "or API key is configured (e.g. e5-small-v2).",
    )
    r.add_argument("--recall-at", type=int, action="append", default=[], help="Also report Recall@K.")
    r.add_argument("--limit-queries", type=int, help="Evaluate the first N queries only.")
    r.add_argument("--cache-dir", help="Embedding cache (default ~/.cache/evidentia/eval).")
    r.add_argument("--no-cache", action="store_true", help="Encode everything (timing runs).")
    r.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="LABEL:KEY=V,KEY=V",
        help="An extra run on the same index with retrieval settings changed, e.g. "
        "'w2:mode=hybrid,dense_weight=2,rrf_k=20' (repeatable); query_prefix=none (or a prefix, _ for a "
        "space) encodes the queries again with another prefix; ivfflat_probe_share=S or ivfflat_probes=N "
        "search an IVFFlat index with other probes.",
    )
    r.add_argument(
        "--folds",
        type=int,
        help="Cross-validate: for each of N folds of the questions choose the best of all modes and variants "
        "on the other folds and report it on this one (mean and spread over the folds).",
    )
    r.add_argument("--fold-seed", type=int, default=0, help="Seed of the fold assignment (default 0).")
    r.add_argument(
        "--study-types-from-titles",
        action="store_true",
        help="Give each document the study type and evidence weight its title implies (the parser's rule for PMC "
        "articles): BEIR corpora carry none, so evidence-aware ranking has nothing to act on without it.",
    )
    r.set_defaults(func=run)
    p.set_defaults(func=lambda _a: (p.print_help(), 2)[1])


def run(args: argparse.Namespace) -> int:
    from evaluation.retrieval import MODES, EvalConfig, default_cache_dir, evaluate, load_dataset
    from shared.settings import EmbeddingSettings, Settings

    settings = Settings()
    if args.model:
        settings = settings.model_copy(update={"embedding": EmbeddingSettings(model=args.model)})
    modes = args.mode or ["hybrid"]
    modes = list(MODES) if "all" in modes else list(dict.fromkeys(modes))
    cache_dir = None if args.no_cache else Path(args.cache_dir) if args.cache_dir else default_cache_dir()
    config = EvalConfig(
        modes=modes,
        database_url=args.database_url,
        cache_dir=cache_dir,
        rerank_depth=args.rerank_depth,
        rerank_model=args.rerank_model,
        recall_ks=sorted(set(args.recall_at)),
        limit_queries=args.limit_queries,
        variants=dict(parse_variant(v) for v in args.variant),
        folds=args.folds,
        fold_seed=args.fold_seed,
        study_types_from_titles=args.study_types_from_titles,
    )
    if args.folds is not None and args.folds < 2:
        print("--folds must be at least 2", file=sys.stderr)
        return 2
    ds = load_dataset(args.dataset, args.split)

    def progress(msg: str) -> None:
        if not args.json:
            print(f"# {msg}", file=sys.stderr, flush=True)

    report = asyncio.run(evaluate(ds, settings, config, progress))
    data = report.as_dict()
    if args.json:
        if len(modes) == 1:
            only = data["modes"][modes[0]]
            print(json.dumps({**{k: only[k] for k in only if k[0].isupper()}, "mode": modes[0], **data}))
        else:
            print(json.dumps(data))
        return 0
    print(
        f"{report.dataset}: {report.documents} documents, {report.chunks} chunks, model {report.model}, "
        f"{len(ds.queries) if not args.limit_queries else args.limit_queries} queries "
        f"(metrics: {report.metrics_impl})"
    )
    for r in report.results:
        cols = "  ".join(f"{k} {v:.4f}" for k, v in r.metrics.items())
        extra = f"  [{r.reranker}]" if r.reranker else ""
        print(f"{r.mode:<14} {cols}  ({r.search_s:.1f}s){extra}")
    print("timings: " + ", ".join(f"{k} {v:.1f}s" for k, v in report.timings_s.items()))
    if report.vector_store:
        vs = report.vector_store
        per_chunk = vs.get("total_bytes_per_chunk")
        print(f"vector index: {vs['precision']} precision, {vs['bytes']:,} bytes ({per_chunk} a chunk)")
    if report.cross_validation is not None:
        print_cross_validation(report.cross_validation)
    return 0


def print_cross_validation(cv: Any) -> None:
    """The fold protocol's table: each candidate's held-out figure when fixed, and the tuned figure."""
    print(f"\n{cv.folds}-fold cross-validation over {cv.queries} questions (seed {cv.seed}); selection by nDCG@10")
    print(f"{'candidate':<36} {'held-out nDCG@10':>18} {'train nDCG@10':>14}")
    for c in cv.candidates:
        s = cv.fixed[c]["nDCG@10"]
        print(f"{c:<36} {s.mean:>11.4f} ± {s.std:.4f} {cv.train[c]['nDCG@10']:>14.4f}")
    print("chosen on the other folds: " + ", ".join(f"fold {i + 1}: {c}" for i, c in enumerate(cv.chosen)))
    print(
        "TUNED (held-out): "
        + "  ".join(f"{m} {s.mean:.4f} ± {s.std:.4f}" for m, s in cv.tuned.items())
        + f"\nchoice on all questions (to ship): {cv.final_choice}"
    )


def parse_variant(text: str) -> tuple[str, dict[str, Any]]:
    """``'label:mode=hybrid,dense_weight=2'`` -> ``('label', {'mode': 'hybrid', 'dense_weight': 2.0})``."""
    label, _, body = text.partition(":")
    values: dict[str, Any] = {}
    for item in filter(None, body.split(",")):
        key, _, raw = item.partition("=")
        try:
            values[key.strip()] = int(raw) if raw.strip().lstrip("-").isdigit() else float(raw)
        except ValueError:
            values[key.strip()] = raw.strip()
    return label.strip(), values
