"""Does the offline MeSH enhancement help retrieval? (issue #19: MeSH-based enhancement in ``/v1/ask``)

``/v1/query`` searches the offline enhancement's query (``QueryEnhancer``: an English question plus the stored
documents' MeSH descriptors whose words all occur in it, or that a lay term maps to); ``/v1/ask`` searches the
question as asked. This measures both on the bundled PubMedQA sample (``data/samples/pqal_dev500.json``): each
of the 500 questions must find its own abstract among the 500 abstracts (no titles), hybrid mode, the
configured model (``--model`` overrides), the retrieval harness's store, searcher and metrics (Recall@1/5/10,
MRR@10, nDCG@10 of the own abstract).

The documents are stored with their MeSH headings (``documents.mesh_terms``), and the vocabulary is read from
the store with the gateway's own query (``services.gateway.store.documents.mesh_vocabulary``); the expanded
query is the product's (``mesh_expand`` + ``expanded_query``). Variants:

- ``as asked``: the question (what ``/v1/ask`` searches today);
- ``mesh top<L>``: expanded with at most L descriptors (the product uses 6). Leaky: the own abstract's
  headings are in the vocabulary, and PubMedQA questions are mostly their article's title, whose words the
  indexers' headings echo;
- ``mesh own-out top<L>``: the vocabulary without the question's own document's headings (each count less
  one, a heading only the own document had is gone): a new question, whose answer is not annotated with its
  wording.

The questions are split into halves by the seeded shuffle of ``bench/extractive_pubmedqa.py`` (``--seed``):
the one knob (L) is chosen on ``tune`` by nDCG@10 and reported on ``report`` (held out), with the product's
L=6 and the paired difference to ``as asked`` (bootstrap 95% interval of the mean difference).

Then issue #17's fold protocol (``--folds``, default 5) over all the variants, ``as asked`` listed first.

    PYTHONPATH=. python bench/mesh_enhancement.py [--model all-MiniLM-L6-v2] [--mode hybrid] \\
        [--results /tmp/mesh.json] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "data" / "samples" / "pqal_dev500.json"
METRICS = ("Recall@1", "Recall@5", "Recall@10", "MRR@10", "nDCG@10")
BASELINE = "as asked"


def vocabulary_without(vocabulary: Mapping[str, int], headings: Sequence[str]) -> dict[str, int]:
    """The vocabulary as it would be without one document: each of its headings used once less (the store
    query counts one use per heading of a document), those it alone used gone."""
    less = Counter(headings)
    out = {}
    for term, uses in vocabulary.items():
        left = uses - less.get(term, 0)
        if left > 0:
            out[term] = left
    return out


def expanded_queries(
    questions: Mapping[str, str],
    vocabulary: Mapping[str, int],
    own_headings: Mapping[str, Sequence[str]],
    *,
    limit: int,
    own_out: bool,
) -> dict[str, tuple[str, list[str]]]:
    """question id -> (the query the product's offline enhancement would search, the descriptors added)."""
    from services.gateway.understanding.enhance import expanded_query, mesh_expand

    out = {}
    for qid, question in questions.items():
        vocab = vocabulary_without(vocabulary, own_headings.get(qid, ())) if own_out else vocabulary
        descriptors = mesh_expand(question, vocab, limit=limit)
        query = expanded_query(question, descriptors)
        out[qid] = (query, [d for d in descriptors if d.lower() not in question.lower()])
    return out


def split_of(ids: Sequence[str], seed: int) -> dict[str, str]:
    """The tune/report halves of ``bench/extractive_pubmedqa.py`` (fold 0 of a 2-fold seeded shuffle: tune)."""
    from evaluation.folds import assign_folds

    return {q: ("tune" if f == 0 else "report") for q, f in assign_folds(ids, 2, seed).items()}


def paired_interval(deltas: Sequence[float], *, resamples: int = 5000, seed: int = 0) -> tuple[float, float]:
    """Bootstrap 95% interval of the mean of per-question differences."""
    if not deltas:
        return (0.0, 0.0)
    d = np.asarray(deltas, dtype=np.float64)
    rng = np.random.default_rng(seed)
    means = d[rng.integers(0, len(d), size=(resamples, len(d)))].mean(axis=1)
    return (float(np.quantile(means, 0.025)), float(np.quantile(means, 0.975)))


async def measure(
    model: str | None, limits: Sequence[int], cache_dir: Path | None, mode: str = "hybrid"
) -> dict[str, Any]:
    """Per-question metrics of every variant, and what each variant added to each question."""
    from evaluation.retrieval import (
        Dataset,
        EvalConfig,
        _encode_queries,
        _run_mode,
        indexed_store,
        load_pubmedqa,
        per_query_metrics,
    )
    from services.gateway.store.documents import mesh_vocabulary
    from services.retriever.engine import CorpusStats, LegMemo, SearchEngine
    from shared.settings import EmbeddingSettings, Settings

    settings = Settings()
    if model:
        settings = settings.model_copy(update={"embedding": EmbeddingSettings(model=model)})
    ds = load_pubmedqa(DATA)
    config = EvalConfig(modes=(), cache_dir=cache_dir)
    ids = sorted(ds.queries)
    out: dict[str, Any] = {"variants": {}, "added": {}, "mode": mode}
    async with indexed_store(ds, settings, config, lambda m: print(f"# {m}", file=sys.stderr)) as store:
        vocabulary = await mesh_vocabulary(store.pool)
        out["model"] = store.embedder.name
        out["vocabulary"] = len(vocabulary)
        searcher = SearchEngine.from_settings(
            store.pool,
            store.index,
            settings.retrieval,
            ef_search=max(settings.database.hnsw_ef_search, 200),
            stats=CorpusStats(ttl_s=1e9),
            memo=LegMemo(),
        )
        variants: dict[str, dict[str, str]] = {BASELINE: dict(ds.queries)}
        for own_out in (False, True):
            for limit in limits:
                label = f"mesh {'own-out ' if own_out else ''}top{limit}"
                expanded = expanded_queries(ds.queries, vocabulary, ds.mesh, limit=limit, own_out=own_out)
                variants[label] = {q: expanded[q][0] for q in ids}
                out["added"][label] = {q: expanded[q][1] for q in ids}
        for label, queries in variants.items():
            texts = [] if mode == "bm25" else [queries[q] for q in ids]
            qvecs = await asyncio.to_thread(_encode_queries, store.cache, store.embedder, texts, None)
            store.cache.save()
            variant_ds = Dataset(ds.name, ds.corpus, queries, ds.qrels, ds.mesh)
            run = await _run_mode(searcher, variant_ds, ids, qvecs, mode, config, None)
            out["variants"][label] = per_query_metrics({q: ds.qrels[q] for q in ids}, run, (1, 5, 10))
            print(f"# {label}: done", file=sys.stderr)
        out["own_in_added"] = {
            label: sum(d in ds.mesh[q] for q in ids for d in added[q]) for label, added in out["added"].items()
        }
    return out


PRODUCT_LIMIT = 6
"""``mesh_expand``'s default ``limit``: what the gateway adds."""


def _choice_key(tune_ndcg: float, family: str, label: str) -> tuple[float, bool, int]:
    limit = int(label[len(family) :])
    return (round(tune_ndcg, 10), limit == PRODUCT_LIMIT, -limit)


def summarise(results: Mapping[str, Any], seed: int, folds: int = 5) -> dict[str, Any]:
    """Mean metrics per split, the L chosen on tune per family, held-out paired differences, and issue #17's
    fold protocol over all the variants (as asked listed first: a tie keeps today's behaviour)."""
    from evaluation.folds import cross_validate, mean_metrics

    per_variant: Mapping[str, Mapping[str, Mapping[str, float]]] = results["variants"]
    ids = sorted(per_variant[BASELINE])
    split = split_of(ids, seed)
    halves = {name: [q for q in ids if split[q] == name] for name in ("tune", "report")}
    halves["all"] = ids
    table: dict[str, dict[str, Any]] = {}
    for label, per_query in per_variant.items():
        added = results["added"].get(label, {})
        table[label] = {
            name: {
                **{m: round(v, 4) for m, v in mean_metrics(per_query, qs).items() if m in METRICS},
                "expanded": sum(bool(added.get(q)) for q in qs),
            }
            for name, qs in halves.items()
        }
    chosen: dict[str, str] = {}
    for family in ("mesh top", "mesh own-out top"):
        labels = [label for label in per_variant if label.startswith(family) and label[len(family) :].isdigit()]
        if labels:
            # Best tune nDCG@10; a tie goes to the product's own limit, then to the smaller one.
            chosen[family.strip()] = max(labels, key=lambda x: _choice_key(table[x]["tune"]["nDCG@10"], family, x))
    held_out: dict[str, dict[str, Any]] = {}
    report = halves["report"]
    base = per_variant[BASELINE]
    for label in per_variant:
        if label == BASELINE:
            continue
        row: dict[str, Any] = {}
        for m in ("nDCG@10", "Recall@1", "MRR@10"):
            deltas = [per_variant[label][q][m] - base[q][m] for q in report]
            low, high = paired_interval(deltas)
            row[m] = {"delta": round(float(np.mean(deltas)), 4), "ci95": [round(low, 4), round(high, 4)]}
        nd = [per_variant[label][q]["nDCG@10"] - base[q]["nDCG@10"] for q in report]
        row["better"] = sum(d > 1e-12 for d in nd)
        row["worse"] = sum(d < -1e-12 for d in nd)
        held_out[label] = row
    cv = cross_validate(
        {BASELINE: per_variant[BASELINE], **{k: v for k, v in per_variant.items() if k != BASELINE}}, folds, seed
    )
    return {
        "model": results.get("model"),
        "mode": results.get("mode", "hybrid"),
        "cross_validation": {
            "folds": folds,
            "chosen_per_fold": cv.chosen,
            "tuned_heldout": {m: s.as_dict() for m, s in cv.tuned.items() if m in METRICS},
            "as_asked_heldout": {m: s.as_dict() for m, s in cv.fixed[BASELINE].items() if m in METRICS},
            "final_choice": cv.final_choice,
        },
        "vocabulary": results.get("vocabulary"),
        "seed": seed,
        "questions": {name: len(qs) for name, qs in halves.items()},
        "table": table,
        "chosen_on_tune": chosen,
        "held_out_vs_as_asked": held_out,
        "own_headings_among_added": results.get("own_in_added", {}),
    }


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", help="Embedding model (default: EVIDENTIA_EMBEDDING_MODEL).")
    p.add_argument(
        "--mode", choices=("hybrid", "dense", "bm25"), default="hybrid", help="Search mode (/v1/ask: hybrid)."
    )
    p.add_argument("--limits", default="1,2,3,6", help="Descriptor limits L to try (the product's is 6).")
    p.add_argument("--seed", type=int, default=0, help="Seed of the tune/report split and of the folds.")
    p.add_argument("--folds", type=int, default=5, help="Folds of the cross-validation (issue #17's protocol).")
    p.add_argument("--results", type=Path, help="Keep the per-question results here (reused when it exists).")
    p.add_argument("--cache-dir", type=Path, help="Embedding cache (default ~/.cache/evidentia/eval).")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)

    from evaluation.retrieval import default_cache_dir

    if args.results and args.results.exists():
        results = json.loads(args.results.read_text(encoding="utf-8"))
    else:
        limits = [int(x) for x in args.limits.split(",") if x.strip()]
        results = asyncio.run(measure(args.model, limits, args.cache_dir or default_cache_dir(), args.mode))
        if args.results:
            args.results.write_text(json.dumps(results), encoding="utf-8")
    summary = summarise(results, args.seed, args.folds)
    if args.json:
        print(json.dumps(summary))
        return 0
    print(
        f"model {summary['model']}, mode {summary['mode']}, vocabulary {summary['vocabulary']} descriptors, "
        f"questions {summary['questions']}"
    )
    head = "  ".join(f"{m:>9}" for m in METRICS)
    for name in ("tune", "report", "all"):
        print(f"\n[{name}]  {'variant':<22} {head}  expanded")
        for label, row in summary["table"].items():
            r = row[name]
            print(f"         {label:<22} " + "  ".join(f"{r[m]:>9.4f}" for m in METRICS) + f"  {r['expanded']:>8}")
    print(f"\nchosen on tune (nDCG@10): {summary['chosen_on_tune']}")
    print("held out (report) vs as asked: mean difference [bootstrap 95%], questions better/worse on nDCG@10")
    for label, row in summary["held_out_vs_as_asked"].items():
        cells = "  ".join(
            f"{m} {row[m]['delta']:+.4f} [{row[m]['ci95'][0]:+.4f}, {row[m]['ci95'][1]:+.4f}]" for m in row if "@" in m
        )
        print(f"  {label:<22} {cells}  {row['better']}/{row['worse']}")
    print(f"own-document headings among the descriptors added: {summary['own_headings_among_added']}")
    cv = summary["cross_validation"]
    print(
        f"\n{cv['folds']} folds (issue #17 protocol, all variants; a tie keeps as asked): "
        f"chosen per fold {cv['chosen_per_fold']}"
    )
    for name, key in (("tuned held-out", "tuned_heldout"), ("as asked held-out", "as_asked_heldout")):
        print(f"  {name:<18} " + "  ".join(f"{m} {cv[key][m]['mean']:.4f} ± {cv[key][m]['std']:.4f}" for m in METRICS))
    print(f"  choice on all questions: {cv['final_choice']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
