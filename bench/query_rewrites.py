"""What the offline query rewrites do to the bundled PubMedQA questions: the follow-up rule and the MeSH expansion.

Neither rewrite has a labelled set, so this prints what they decide, to compare one tree with another (a change of
the words, stop words or stems they read shows up as a changed decision):

- ``follow_up``: the questions the offline follow-up rule (``is_follow_up``) takes for follow-ups. All 500 are
  standalone questions (each is its article's title), so each one flagged would be rewritten by mistake;
- ``mesh``: the MeSH descriptors ``mesh_expand`` adds to each question, with the vocabulary of the 500 documents'
  own headings (one use per heading and document, as the store counts them).

``--json`` prints every decision (diff two runs); the default prints the counts and a digest of the decisions.

    PYTHONPATH=. python bench/query_rewrites.py [--json]
"""

from __future__ import annotations

import argparse
import hashlib
import json
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "data" / "samples" / "pqal_dev500.json"


def decisions() -> dict[str, Any]:
    from services.gateway.understanding.enhance import mesh_expand
    from services.gateway.understanding.rewrite import is_follow_up

    data: dict[str, dict[str, Any]] = json.loads(DATA.read_text(encoding="utf-8"))
    vocabulary: Counter[str] = Counter()
    for record in data.values():
        vocabulary.update(set(record.get("MESHES") or []))
    questions = {pmid: record["QUESTION"] for pmid, record in sorted(data.items())}
    return {
        "vocabulary": len(vocabulary),
        "follow_up": [pmid for pmid, q in questions.items() if is_follow_up(q)],
        "mesh": {pmid: mesh_expand(q, vocabulary) for pmid, q in questions.items()},
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--json", action="store_true", help="print every decision")
    args = p.parse_args()
    out = decisions()
    if args.json:
        print(json.dumps(out, indent=1, sort_keys=True))
        return 0
    mesh = out["mesh"]
    digest = hashlib.sha256(json.dumps(out, sort_keys=True).encode()).hexdigest()[:16]
    print(f"questions {len(mesh)}; vocabulary {out['vocabulary']} descriptors")
    print(f"follow_up: {len(out['follow_up'])} standalone questions taken for follow-ups")
    print(
        f"mesh: {sum(bool(d) for d in mesh.values())} questions expanded, "
        f"{sum(len(d) for d in mesh.values())} descriptors added"
    )
    print(f"digest {digest}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
