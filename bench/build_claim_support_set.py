"""Build ``tests/fixtures/claim_support/pubmedqa_claims.json``, the labelled claim-support set (issue #15).

Run once from a checkout next to the reference data (``../shared/data``); the product never reads that folder:

    python -m bench.build_claim_support_set --pubmedqa ../shared/data/pubmedqa/pqal_dev500.json

Each PubMedQA PQA-L instance gives a real abstract split in two: the conclusion (``LONG_ANSWER``) and the rest
(``CONTEXTS``). The conclusion is the claim; the passages are abstracts without their conclusions, so a claim is
never a verbatim copy of the passage it is scored against.

- supported: the claim cited to its own abstract (without the conclusion);
- not supported: the same claim cited to another abstract of the set that a retriever returns for the claim's
  question (the top TF-IDF match other than its own): a real, on-topic source it does not rest on, i.e. a
  misattributed citation.

Every instance goes to the ``calibration`` or the ``test`` half by a hash of its PMID (both examples of one claim
in the same half); thresholds are chosen on ``calibration`` and figures reported on ``test``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path

from sklearn.feature_extraction.text import TfidfVectorizer

OUT = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "claim_support" / "pubmedqa_claims.json"
LICENCE = (
    "Derived from PubMedQA PQA-L (github.com/pubmedqa/pubmedqa, data/ori_pqal.json, commit 1cbae8e92f72), the 500 "
    "instances outside the official test set. Licence: MIT (that repository's LICENSE); the abstracts are PubMed "
    "text. Built by bench/build_claim_support_set.py."
)


def split_of(pmid: str) -> str:
    return "calibration" if int(hashlib.sha256(pmid.encode()).hexdigest(), 16) % 2 == 0 else "test"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pubmedqa", type=Path, required=True)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    data = json.loads(args.pubmedqa.read_text())
    pmids = sorted(data)
    abstracts = {p: " ".join(data[p]["CONTEXTS"]).strip() for p in pmids}
    vec = TfidfVectorizer(stop_words="english", sublinear_tf=True).fit([abstracts[p] for p in pmids])
    docs = vec.transform([abstracts[p] for p in pmids])
    questions = vec.transform([data[p]["QUESTION"] for p in pmids])
    sims = (questions @ docs.T).toarray()
    examples = []
    for i, p in enumerate(pmids):
        claim = " ".join(data[p]["LONG_ANSWER"].split())
        order = sims[i].argsort()[::-1]
        other = next(pmids[j] for j in order if pmids[j] != p)
        split = split_of(p)
        examples.append({"claim": claim, "claim_pmid": p, "cited_pmid": p, "supported": True, "split": split})
        examples.append({"claim": claim, "claim_pmid": p, "cited_pmid": other, "supported": False, "split": split})
    args.out.parent.mkdir(parents=True, exist_ok=True)
    payload = {"licence": LICENCE, "abstracts": abstracts, "examples": examples}
    args.out.write_text(json.dumps(payload, indent=0, ensure_ascii=False) + "\n")
    print(f"{len(examples)} examples ({sum(e['split'] == 'test' for e in examples)} test) -> {args.out}")


if __name__ == "__main__":
    main()
