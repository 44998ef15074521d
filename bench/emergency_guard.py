"""Precision and recall of the emergency guard (``shared.safety``) on the labelled question sets.

    PYTHONPATH=. python bench/emergency_guard.py [tests/fixtures/emergency/guard_set.jsonl ...] [--errors] [--latency]

Positive class: an emergency. Prints, per set, the counts, precision, recall, the clinician/research
questions blocked, and the mean time per message; ``--errors`` lists every mistake with the guard's reason.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from shared.safety import default_guard

FIXTURES = Path("tests/fixtures/emergency")
#: The guard's labelled sets: guard_set and rounds 1-3 are its training data (each round was held out once
#: before it was trained on); guard_heldout was never trained or tuned on.
NAMES = ("guard_heldout", "guard_set", "guard_round1", "guard_round2", "guard_round3")
SETS = [FIXTURES / f"{name}.jsonl" for name in NAMES]


def evaluate(path: Path, show_errors: bool) -> dict[str, float]:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    tp = fp = fn = tn = 0
    guard = default_guard()
    start = time.perf_counter()
    verdicts = guard.check_many([r["text"] for r in rows])
    per_message_ms = (time.perf_counter() - start) * 1000 / max(1, len(rows))
    for r, v in zip(rows, verdicts, strict=True):
        gold = r["label"] == "emergency"
        if gold and v.emergency:
            tp += 1
        elif gold:
            fn += 1
            if show_errors:
                print(f"  MISSED  [{r['topic']}/{r['voice']}] {r['text']}\n          {v.reason}")
        elif v.emergency:
            fp += 1
            if show_errors:
                print(f"  BLOCKED [{r['topic']}/{r['voice']}] {r['text']}\n          {v.reason}")
        else:
            tn += 1
    precision = tp / max(1, tp + fp)
    recall = tp / max(1, tp + fn)
    print(
        f"{path}: {len(rows)} messages ({tp + fn} emergencies, {fp + tn} questions): "
        f"precision {precision:.3f}, recall {recall:.3f}, questions blocked {fp}, emergencies missed {fn}, "
        f"{per_message_ms:.1f} ms/message in one batch"
    )
    return {"precision": precision, "recall": recall, "blocked": fp, "missed": fn}


def latency(n: int = 20) -> None:
    """Median and 95th percentile time of one message checked alone (as a request is)."""
    guard = default_guard()
    rows = [json.loads(line) for line in SETS[0].read_text().splitlines() if line.strip()][:n]
    guard.check("warm up")
    times = []
    for r in rows:
        t0 = time.perf_counter()
        guard.check(r["text"])
        times.append((time.perf_counter() - t0) * 1000)
    times.sort()
    print(
        f"one message at a time ({'rules + semantic model' if guard.semantic else 'rules only'}): "
        f"median {times[len(times) // 2]:.1f} ms, p95 {times[int(len(times) * 0.95) - 1]:.1f} ms over {len(times)}"
    )


def main(argv: list[str]) -> None:
    show = "--errors" in argv
    paths = [Path(a) for a in argv if not a.startswith("--")] or SETS
    for p in paths:
        evaluate(p, show)
    if "--latency" in argv:
        latency()


if __name__ == "__main__":
    main(sys.argv[1:])
