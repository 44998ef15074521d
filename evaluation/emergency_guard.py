"""Train the emergency guard's semantic model (``shared/safety_guard.json``) from labelled messages.

    PYTHONPATH=. python -m evaluation.emergency_guard tests/fixtures/emergency/guard_set.jsonl \
        tests/fixtures/emergency/guard_round1.jsonl ... [--out shared/safety_guard.json]

Each message is embedded with the guard's model (``EVIDENTIA_SAFETY_GUARD_MODEL``, the packaged
all-MiniLM-L6-v2 by default) and a logistic regression separates emergencies from questions. The
regularisation and the threshold are chosen by 5-fold cross-validation on the given sets only: the threshold
is the lowest at which no question of any fold is blocked, less a small margin toward precision. Never pass
the held-out set (``guard_heldout.jsonl``) here; ``bench/emergency_guard.py`` measures on it.
"""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import numpy.typing as npt
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import StratifiedKFold

from shared.embedding.factory import get_embedder
from shared.safety import GUARD_WEIGHTS, guard_embedding_settings
from shared.settings import SafetySettings

CS = (0.3, 1.0, 3.0, 10.0)


def load(paths: list[Path]) -> tuple[list[str], npt.NDArray[np.bool_]]:
    rows = [json.loads(line) for p in paths for line in p.read_text().splitlines() if line.strip()]
    return [r["text"] for r in rows], np.array([r["label"] == "emergency" for r in rows])


def cross_validate(x: npt.NDArray[np.float32], y: npt.NDArray[np.bool_]) -> tuple[float, float, dict[str, float]]:
    """(C, threshold, report): the C with the best out-of-fold recall at zero blocked questions."""
    best: tuple[float, float, float] | None = None
    report: dict[str, float] = {}
    folds = StratifiedKFold(n_splits=5, shuffle=True, random_state=15)
    for c in CS:
        scores = np.zeros(len(y))
        for train, test in folds.split(x, y):
            model = LogisticRegression(C=c, max_iter=5000).fit(x[train], y[train])
            scores[test] = model.predict_proba(x[test])[:, 1]
        threshold = float(scores[~y].max()) + 0.02  # above every question's out-of-fold score
        recall = float((scores[y] >= threshold).mean())
        report[f"C={c}: out-of-fold recall at no blocked question"] = recall
        if best is None or recall > best[2]:
            best = (c, threshold, recall)
    assert best is not None
    return best[0], min(best[1], 0.9), report


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("sets", nargs="+", type=Path)
    ap.add_argument("--out", type=Path, default=GUARD_WEIGHTS)
    args = ap.parse_args(argv)
    if any(p.name == "guard_heldout.jsonl" for p in args.sets):
        ap.error("guard_heldout.jsonl is the held-out set: never train on it")
    settings = SafetySettings()
    texts, y = load(args.sets)
    embedder = get_embedder(guard_embedding_settings(settings))
    x = np.asarray(embedder.encode_queries(texts), dtype=np.float32)
    c, threshold, report = cross_validate(x, y)
    model = LogisticRegression(C=c, max_iter=5000).fit(x, y)
    out = {
        "model": settings.guard_model,
        "dim": int(x.shape[1]),
        "C": c,
        "threshold": round(threshold, 4),
        "intercept": float(model.intercept_[0]),
        "coef": [round(float(v), 6) for v in model.coef_[0]],
        "trained_on": {p.name: sum(1 for line in p.read_text().splitlines() if line.strip()) for p in args.sets},
        "cross_validation": report,
        "trained_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps({k: v for k, v in out.items() if k != "coef"}, indent=1))


if __name__ == "__main__":
    main()
