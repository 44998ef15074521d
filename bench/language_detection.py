"""Accuracy and cost of the gateway's language detection on labelled questions.

    PYTHONPATH=. python bench/language_detection.py

Sets: the emergency guard's held-out questions (``tests/fixtures/emergency/guard_heldout.jsonl``) and the rest of
its labelled rounds, all English, many of them short, lay and full of drug and disease names; the 500 bundled
PubMedQA questions (``data/samples/pqal_dev500.json``, English) that the ask tests and benchmarks ask; and the
multilingual questions of ``tests/fixtures/language/questions.jsonl`` (French, Spanish, German, Italian,
Portuguese, Dutch, Russian, Chinese, Japanese, Korean, Arabic, and English keyword queries). Printed per set:
questions, correct, accuracy, the wrong answers (up to five), and the CPU time per question after a warm-up; then
the process's peak resident memory.
"""

from __future__ import annotations

import json
import resource
import time
from pathlib import Path

from services.gateway.understanding.language import detect_language

ROOT = Path(__file__).resolve().parents[1]
EMERGENCY = ROOT / "tests" / "fixtures" / "emergency"
MULTILINGUAL = ROOT / "tests" / "fixtures" / "language" / "questions.jsonl"
PUBMEDQA = ROOT / "data" / "samples" / "pqal_dev500.json"


def _jsonl(path: Path) -> list[dict[str, str]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def labelled_sets() -> dict[str, list[tuple[str, str]]]:
    """Each set's (question, expected language code) pairs."""
    rounds = ["guard_set.jsonl", "guard_round1.jsonl", "guard_round2.jsonl", "guard_round3.jsonl"]
    pubmedqa = json.loads(PUBMEDQA.read_text())
    return {
        "emergency held-out": [(r["text"], "en") for r in _jsonl(EMERGENCY / "guard_heldout.jsonl")],
        "emergency rounds": [(r["text"], "en") for name in rounds for r in _jsonl(EMERGENCY / name)],
        "pubmedqa questions": [(str(v["QUESTION"]), "en") for v in pubmedqa.values()],
        "multilingual": [(r["text"], r["lang"]) for r in _jsonl(MULTILINGUAL)],
    }


def main() -> None:
    sets = labelled_sets()
    t0 = time.process_time()
    detect_language("Quel est le traitement du paludisme ?")
    print(f"first call (loads the detector): {1000 * (time.process_time() - t0):.0f} ms CPU")
    for name, pairs in sets.items():
        t0 = time.process_time()
        answers = [detect_language(text).code.split("-")[0] for text, _ in pairs]  # "zh-cn" is Chinese
        cpu = time.process_time() - t0
        wrong = [(text, want, got) for (text, want), got in zip(pairs, answers, strict=True) if got != want]
        right = len(pairs) - len(wrong)
        print(
            f"{name}: {right}/{len(pairs)} correct, accuracy {right / len(pairs):.3f}, "
            f"{1000 * cpu / len(pairs):.2f} ms CPU per question"
        )
        for text, want, got in wrong[:5]:
            print(f"    wrong: {got} for {want}: {text[:90]}")
    print(f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")


if __name__ == "__main__":
    main()
