"""How many of an IVFFlat index's lists a query must search: the default of ``EVIDENTIA_DATABASE_IVFFLAT_PROBE_SHARE``
chosen on held-out folds (issue 14; "tune only on what you can hold out").

One throw-away store of a BEIR dataset (``evidentia eval retrieval``'s own: the product's parser, chunker, lexical
index and vector table), its vectors under an IVFFlat index of ``--lists`` lists; every question is searched
(dense and hybrid) at each share of the lists in ``--shares``, listed cheapest first, 1.0 being exact search.
Then, per fold of the questions, the cheapest share whose mean dense nDCG@10 on the *other* folds is within
``--tolerance`` of the best share's is chosen (``evaluation.folds.cross_validate`` with a tolerance), and its
figures on the held-out fold are reported beside exact search's: the estimate of what the chosen share costs
on questions it was not chosen on. The share chosen on all the questions is the default to ship.

    python bench/ivfflat_probes.py --dataset ../shared/data/beir_scifact --split train \
        --model all-MiniLM-L6-v2 --json-out bench/results/ivfflat_probes_scifact.json

Each list of the store holds ~``chunks / lists`` vectors; at 10^6 vectors the retriever's automatic lists hold
~1,000. The share, not the count, is what carries over between sizes (a query reads that share of the vectors).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evaluation.folds import Summary, assign_folds, cross_validate, mean_metrics
from evaluation.retrieval import EvalConfig, default_cache_dir, evaluate, load_dataset
from services.retriever.engine.vector.ann_index import probes_for
from shared.settings import EmbeddingSettings, Settings

MODES = ("dense", "hybrid")


def label(share: float) -> str:
    return f"share {share:g}"


async def run(args: argparse.Namespace) -> dict[str, Any]:
    shares = sorted({float(s) for s in args.shares.split(",")})
    if shares[-1] != 1.0:
        shares.append(1.0)  # exact search: the reference
    settings = Settings()
    if args.model:
        settings = settings.model_copy(update={"embedding": EmbeddingSettings(model=args.model)})
    db = settings.database.model_copy(
        update={"vector_index": "ivfflat", "ivfflat_lists": args.lists, "ivfflat_min_rows": 1, "ivfflat_probes": 0}
    )
    settings = settings.model_copy(update={"database": db})
    variants = {f"{mode} {label(s)}": {"mode": mode, "ivfflat_probe_share": s} for mode in args.modes for s in shares}
    config = EvalConfig(
        modes=[],
        cache_dir=Path(args.cache_dir) if args.cache_dir else default_cache_dir(),
        recall_ks=[100],
        limit_queries=args.limit_queries,
        variants=variants,
    )
    started = time.perf_counter()
    report = await evaluate(load_dataset(args.dataset, args.split), settings, config, progress=print)
    by_label = {r.mode: r for r in report.results}  # a variant's result is named "<mode> <label>"
    rows = {mode: {s: by_label[f"{mode} {mode} {label(s)}"] for s in shares} for mode in args.modes}
    # The share is chosen on the first mode (the dense leg, which the knob acts on); every mode is then reported
    # on each held-out fold at the share chosen for that fold.
    select = args.modes[0]
    cv = cross_validate(
        {label(s): rows[select][s].per_query for s in shares}, args.folds, args.fold_seed, tolerance=args.tolerance
    )
    fold_of = assign_folds(sorted(rows[select][1.0].per_query), args.folds, args.fold_seed)
    held = [[q for q, f in fold_of.items() if f == fold] for fold in range(args.folds)]
    share_of = {label(s): s for s in shares}
    per_mode: dict[str, dict[str, Any]] = {}
    for mode in args.modes:

        def heldout(share: float, fold: int, mode: str = mode) -> float:
            return mean_metrics(rows[mode][share].per_query, held[fold])["nDCG@10"]

        chosen = [heldout(share_of[c], f) for f, c in enumerate(cv.chosen)]
        exact = [heldout(1.0, f) for f in range(args.folds)]
        per_mode[mode] = {
            "shares": {
                label(s): {
                    "probes": probes_for(args.lists, db.model_copy(update={"ivfflat_probe_share": s})),
                    "nDCG@10": round(rows[mode][s].metrics["nDCG@10"], 4),
                    "Recall@100": round(rows[mode][s].metrics.get("Recall@100", 0.0), 4),
                }
                for s in shares
            },
            "chosen_heldout_nDCG@10": Summary.of(chosen).as_dict(),
            "exact_heldout_nDCG@10": Summary.of(exact).as_dict(),
            "heldout_loss_per_fold": [round(e - c, 4) for e, c in zip(exact, chosen, strict=True)],
        }
    return {
        "dataset": report.dataset,
        "split": args.split,
        "model": report.model,
        "chunks": report.chunks,
        "lists": args.lists,
        "folds": args.folds,
        "fold_seed": args.fold_seed,
        "tolerance": args.tolerance,
        "select_by": f"{select} nDCG@10",
        "chosen_per_fold": cv.chosen,
        "final_choice": cv.final_choice,
        "modes": per_mode,
        "took_s": round(time.perf_counter() - started, 1),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", required=True, help="A BEIR folder (corpus.jsonl, queries.jsonl, qrels/).")
    ap.add_argument("--split", default="train", help="qrels/SPLIT.tsv: the questions the share is chosen on.")
    ap.add_argument("--model", help="Embedding model (default: EVIDENTIA_EMBEDDING_MODEL).")
    ap.add_argument("--lists", type=int, default=107, help="IVFFlat lists of the store (default 107).")
    ap.add_argument("--shares", default="0.04,0.08,0.15,0.25,0.37,0.5,0.75", help="Shares of the lists, 1.0 added.")
    ap.add_argument("--modes", default=",".join(MODES), help="Modes; the first one selects (default dense).")
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--fold-seed", type=int, default=0)
    ap.add_argument("--tolerance", type=float, default=0.005, help="nDCG@10 a share may lose against exact.")
    ap.add_argument("--limit-queries", type=int)
    ap.add_argument("--cache-dir", help="Embedding cache (default ~/.cache/evidentia/eval).")
    ap.add_argument("--json-out", help="Also write the JSON here.")
    args = ap.parse_args()
    args.modes = [m for m in args.modes.split(",") if m]
    result = asyncio.run(run(args))
    text = json.dumps(result, indent=2)
    print(text)
    if args.json_out:
        Path(args.json_out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
