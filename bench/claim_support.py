"""Precision and recall of the offline claim-support check on the labelled set (issue #15).

    python -m bench.claim_support                 # report on the test half with the shipped calibration
    python -m bench.claim_support --calibrate     # fit on the calibration half, print the constants, report
    python -m bench.claim_support --limit 100     # a quick look while developing

The set (``tests/fixtures/claim_support/pubmedqa_claims.json``, built by ``bench/build_claim_support_set.py``):
real PubMedQA conclusions cited to their own abstract (supported) or to another abstract a retriever returns for
the same question (not supported). The check's job is to flag unsupported citations, so "unsupported" is the
positive class: precision = flagged sentences that are really unsupported, recall = unsupported sentences
flagged. Both classes are printed. Calibration (``--calibrate``) uses only the calibration half; the figures
are always those of the test half.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from shared.embedding import get_embedder
from shared.settings import EmbeddingSettings, SupportSettings
from shared.support import LEXICAL_MODEL, SupportModel, SupportScorer, calibration_for

FIXTURE = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "claim_support" / "pubmedqa_claims.json"


def prf(flagged: np.ndarray, unsupported: np.ndarray) -> dict[str, float]:
    tp = float((flagged & unsupported).sum())
    fp = float((flagged & ~unsupported).sum())
    fn = float((~flagged & unsupported).sum())
    tn = float((~flagged & ~unsupported).sum())
    return {
        "unsupported_precision": tp / max(1.0, tp + fp),
        "unsupported_recall": tp / max(1.0, tp + fn),
        "supported_precision": tn / max(1.0, tn + fn),
        "supported_recall": tn / max(1.0, tn + fp),
        "accuracy": (tp + tn) / max(1.0, tp + tn + fp + fn),
    }


def fit(features: np.ndarray, supported: np.ndarray) -> SupportModel:
    """Logistic regression on (similarity, overlap), then the threshold that best balances the two classes."""
    from sklearn.linear_model import LogisticRegression

    lr = LogisticRegression(C=10.0).fit(features, supported)
    w = lr.coef_[0]
    b = float(lr.intercept_[0])
    probs = lr.predict_proba(features)[:, 1]
    best, best_t = -1.0, 0.5
    for t in np.linspace(0.05, 0.95, 91):
        m = prf(probs < t, ~supported)
        score = min(m["unsupported_precision"], m["unsupported_recall"])
        if score > best:
            best, best_t = score, float(t)
    return SupportModel(
        bias=round(b, 4),
        w_similarity=round(float(w[0]), 4),
        w_overlap=round(float(w[1]), 4),
        threshold=round(best_t, 2),
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calibrate", action="store_true", help="fit the models on the calibration half first")
    ap.add_argument("--limit", type=int, default=0, help="use only the first N claims of each half")
    ap.add_argument(
        "--model", default=SupportSettings().similarity_model, help="embedding model (default: the configured one)"
    )
    args = ap.parse_args()
    data: dict[str, Any] = json.loads(FIXTURE.read_text())
    abstracts: dict[str, str] = data["abstracts"]
    examples: list[dict[str, Any]] = data["examples"]
    if args.limit:
        keep: dict[str, list[dict[str, Any]]] = {"calibration": [], "test": []}
        for e in examples:
            if len(keep[e["split"]]) < 2 * args.limit:
                keep[e["split"]].append(e)
        examples = keep["calibration"] + keep["test"]
    claims = [e["claim"] for e in examples]
    passages = [[abstracts[e["cited_pmid"]]] for e in examples]
    supported = np.array([e["supported"] for e in examples])
    test = np.array([e["split"] == "test" for e in examples])

    t0 = time.perf_counter()
    embedder = get_embedder(EmbeddingSettings(model=args.model))
    embedder.warm_up()
    load_s = time.perf_counter() - t0
    shipped = calibration_for(embedder.name)
    # Features need the embedder whatever the calibration; a placeholder model until one is fitted or shipped.
    scorer = SupportScorer(embedder, model=shipped or LEXICAL_MODEL)
    t0 = time.perf_counter()
    feats = scorer.features(claims, passages)
    feature_s = time.perf_counter() - t0
    sim = np.array([f[0] or 0.0 for f in feats])
    ov = np.array([f[1] for f in feats])
    X = np.stack([sim, ov], axis=1)

    models = {"similarity": shipped, "lexical": LEXICAL_MODEL}
    if shipped is None and not args.calibrate:
        raise SystemExit(f"no calibration shipped for {embedder.name}: run with --calibrate")
    if args.calibrate:
        cal = ~test
        models["similarity"] = fit(X[cal], supported[cal])
        lexical = fit(np.stack([np.zeros(cal.sum()), ov[cal]], axis=1), supported[cal])
        models["lexical"] = SupportModel(lexical.bias, 0.0, lexical.w_overlap, lexical.threshold)
        for name, fitted in models.items():
            print(f"calibrated {name} for {embedder.name}: {fitted}")
    print(
        f"model {embedder.name}; {len(examples)} examples ({int(test.sum())} test); "
        f"load {load_s:.1f} s; features {1000 * feature_s / len(examples):.1f} ms per claim"
    )
    for name, model in models.items():
        assert model is not None
        m = model
        probs = np.array([m.probability(s if name == "similarity" else 0.0, o) for s, o in X[test]])
        flagged = probs < m.threshold
        r = prf(flagged, ~supported[test])
        print(f"{name:10s} threshold {m.threshold:.2f}: " + ", ".join(f"{k} {v:.3f}" for k, v in r.items()))


if __name__ == "__main__":
    main()
