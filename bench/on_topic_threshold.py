"""The on-topic threshold of ``/v1/ask``'s ``fetch: auto`` (:data:`services.gateway.livefetch.topic.MIN_COVERAGE`)
chosen on held-out data, with the held-out score of that choice.

    .venv/bin/python bench/on_topic_threshold.py --json

The data: the bundled PubMedQA questions (``data/samples/pqal_dev500.json``) and their abstracts
(``data/samples/pubmedqa500.jsonl``), without the questions and preloaded records of ``bench/live_fetch.py``
(its default seed and sizes), so the benchmark that measures the trigger did not choose it. For each question
its own abstract, without its title, is on topic (PubMedQA's questions are their papers' titles reworded: with
the title every own record covers every concept, which no other paper on the topic would; the body is what a
paper on the topic shares with the question); the ``--negatives`` other records (title and abstract) covering
most of its concepts (the best an off-topic store could offer lexically) are off topic. The questions are split
into ``--folds`` folds; for each fold the threshold (a share of the question's concepts, on a grid of tenths)
with the best balanced accuracy on the other folds is scored on it. The threshold proposed is the one chosen on all the
questions; ties go to the lower threshold (fewer needless searches). ``--beir DIR`` does the same on SciFact's
training claims (a separate data set: each claim's cited abstract on topic, see :func:`beir_scores`).
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
for _p in (ROOT, ROOT / "bench"):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

from live_fetch import QUESTIONS, RECORDS, shuffled  # noqa: E402

from services.gateway.livefetch.query import question_concepts  # noqa: E402
from services.gateway.livefetch.topic import coverage, text_stems  # noqa: E402

GRID = [round(0.1 * i, 1) for i in range(1, 11)]


def load() -> tuple[dict[str, str], dict[str, tuple[str, str]]]:
    """{PMID: question} and {PMID: (title, abstract)}."""
    questions = {k: str(v["QUESTION"]) for k, v in json.loads(QUESTIONS.read_text()).items()}
    records: dict[str, tuple[str, str]] = {}
    for line in RECORDS.read_text(encoding="utf-8").split("\n"):  # not splitlines: abstracts hold U+2028
        if line.strip():
            d = json.loads(line)
            records[d["pmid"]] = (str(d["title"]), str(d.get("abstract") or ""))
    return questions, records


def live_fetch_pmids(
    questions: dict[str, str], records: dict[str, tuple[str, str]], seed: int, asked: int, preload: int
) -> set[str]:
    """The PMIDs ``bench/live_fetch.py`` asks and preloads (its own order, from :func:`live_fetch.shuffled`)."""
    order, _ = shuffled(questions, records, seed)
    return set(order[: asked + preload])


def balanced_accuracy(pos: Sequence[float], neg: Sequence[float], t: float) -> float:
    tpr = sum(c >= t for c in pos) / max(1, len(pos))
    tnr = sum(c < t for c in neg) / max(1, len(neg))
    return (tpr + tnr) / 2


def best(pos: Sequence[float], neg: Sequence[float]) -> float:
    return max(GRID, key=lambda t: (balanced_accuracy(pos, neg, t), -t))


Scores = dict[str, tuple[float, list[float]]]
"""{question id: (its on-topic record's coverage, the off-topic records' coverages)}."""


def pubmedqa_scores(args: argparse.Namespace) -> tuple[Scores, int]:
    """The PubMedQA questions' scores (the live-fetch benchmark's left out) and how many were left out."""
    questions, records = load()
    pmids = sorted(p for p in questions if p in records)
    held = live_fetch_pmids(questions, records, args.bench_seed, args.bench_questions, args.bench_preload)
    whole = {p: text_stems(r) for p, r in records.items()}
    scores: Scores = {}
    for p in (p for p in pmids if p not in held):
        concepts = question_concepts(questions[p])
        own = coverage(concepts, text_stems([records[p][1]]))
        others = sorted((coverage(concepts, whole[o]) for o in records if o != p), reverse=True)
        scores[p] = (own, others[: args.negatives])
    return scores, len(held)


def beir_scores(folder: Path, negatives: int) -> Scores:
    """SciFact's training claims (BEIR layout: ``corpus.jsonl.gz``, ``queries.train.jsonl``,
    ``qrels/train.tsv``): a claim's cited abstract (title and text; the claims are not its title reworded) is on
    topic, the ``negatives`` other abstracts covering most of its concepts off topic."""
    with gzip.open(folder / "corpus.jsonl.gz", "rt", encoding="utf-8") as f:
        corpus = {d["_id"]: text_stems([d.get("title") or "", d.get("text") or ""]) for d in map(json.loads, f)}
    claims = {d["_id"]: d["text"] for d in map(json.loads, (folder / "queries.train.jsonl").open(encoding="utf-8"))}
    gold: dict[str, set[str]] = {}
    for line in (folder / "qrels" / "train.tsv").read_text().splitlines()[1:]:
        q, doc, _ = line.split("\t")
        if doc in corpus:
            gold.setdefault(q, set()).add(doc)
    scores: Scores = {}
    for q, docs in sorted(gold.items()):
        if q not in claims:
            continue
        concepts = question_concepts(claims[q])
        own = max(coverage(concepts, corpus[d]) for d in docs)
        others = sorted((coverage(concepts, s) for d, s in corpus.items() if d not in docs), reverse=True)
        scores[q] = (own, others[:negatives])
    return scores


def run(args: argparse.Namespace) -> dict[str, Any]:
    if args.beir:
        scores, held = beir_scores(Path(args.beir), args.negatives), 0
    else:
        scores, held = pubmedqa_scores(args)
    pmids = sorted(scores)
    order = list(pmids)
    random.Random(args.seed).shuffle(order)
    folds = [order[i :: args.folds] for i in range(args.folds)]
    per_fold = []
    for i, test in enumerate(folds):
        train = [p for j, f in enumerate(folds) if j != i for p in f]
        t = best([scores[p][0] for p in train], [n for p in train for n in scores[p][1]])
        per_fold.append(
            {
                "threshold": t,
                "held_out_balanced_accuracy": round(
                    balanced_accuracy([scores[p][0] for p in test], [n for p in test for n in scores[p][1]], t), 3
                ),
                "held_out_own_on_topic": round(sum(scores[p][0] >= t for p in test) / len(test), 3),
                "held_out_negatives_off_topic": round(
                    sum(n < t for p in test for n in scores[p][1]) / max(1, sum(len(scores[p][1]) for p in test)), 3
                ),
            }
        )
    pos = [s[0] for s in scores.values()]
    neg = [n for s in scores.values() for n in s[1]]
    chosen = best(pos, neg)
    return {
        "data": f"SciFact train ({args.beir})" if args.beir else "PubMedQA (bundled)",
        "questions": len(pmids),
        "left_out_for_live_fetch": held,
        "negatives_per_question": args.negatives,
        "folds": per_fold,
        "chosen": chosen,
        "balanced_accuracy_all": round(balanced_accuracy(pos, neg, chosen), 3),
        "by_threshold": {t: round(balanced_accuracy(pos, neg, t), 3) for t in GRID},
    }


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--negatives", type=int, default=3, help="Off-topic abstracts per question (the closest).")
    ap.add_argument("--seed", type=int, default=7, help="The folds' shuffle.")
    ap.add_argument("--bench-seed", type=int, default=35, help="bench/live_fetch.py's --seed (its records left out).")
    ap.add_argument("--bench-questions", type=int, default=10)
    ap.add_argument("--bench-preload", type=int, default=30)
    ap.add_argument("--beir", metavar="DIR", help="SciFact in BEIR layout instead of PubMedQA (see beir_scores).")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    result = run(args)
    print(json.dumps(result, indent=2) if args.json else result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
