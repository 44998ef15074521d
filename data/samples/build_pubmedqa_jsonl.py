"""Turn PubMedQA PQA-L (``pqal_dev500.json``) into Evidentia's JSON-lines document import format.

Each instance is a real PubMed abstract: its question is the article's title (PubMedQA derives its
questions from titles), CONTEXTS with LABELS are the structured abstract, LONG_ANSWER is the conclusion.
Run: ``python data/samples/build_pubmedqa_jsonl.py`` (writes ``pubmedqa500.jsonl`` beside it).
"""

from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).resolve().parent


def convert(instance_pmid: str, inst: dict[str, object]) -> dict[str, object]:
    contexts = list(inst["CONTEXTS"])  # type: ignore[call-overload]
    labels = list(inst["LABELS"])  # type: ignore[call-overload]
    sections = [{"label": str(lab).title(), "text": str(txt)} for lab, txt in zip(labels, contexts, strict=True)]
    sections.append({"label": "Conclusions", "text": str(inst["LONG_ANSWER"])})
    abstract = "\n".join(f"{s['label'].upper()}: {s['text']}" for s in sections)
    year = str(inst.get("YEAR") or "")
    return {
        "source": "pubmed",
        "source_id": instance_pmid,
        "pmid": instance_pmid,
        "title": str(inst["QUESTION"]),
        "abstract": abstract,
        "abstract_sections": sections,
        "year": int(year) if year.isdigit() else None,
        "pub_date": year if year.isdigit() else None,
        "mesh": [{"descriptor": m, "qualifiers": [], "major": False} for m in inst.get("MESHES", [])],  # type: ignore[attr-defined]
        "language": "eng",
    }


def main() -> None:
    data = json.loads((HERE / "pqal_dev500.json").read_text())
    with open(HERE / "pubmedqa500.jsonl", "w") as out:
        for pmid, inst in data.items():
            out.write(json.dumps(convert(pmid, inst), ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
