"""Guideline recommendations (seed 004): condition + clinical findings -> guideline sections -> Assessment & Plan.

The query combines the condition with the findings ("Malaria. symptom: fever 3 days. medical_history:
pregnant first trimester."): the condition finds the guideline, the findings find the section. Only
guideline chunks (Bookshelf sources) are searched. The plan is the synthesizer's verified answer (Claude,
or extractive sentences offline), each sentence attributed to the guideline section it came from, shown
by its title path ("Guidelines for the treatment of malaria > Malaria in pregnancy > First trimester").
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from shared.citations import cited_ids
from shared.models import SearchHit

_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\[])")
_BRACKET = re.compile(r"\[[^\]]*\]")
_WORD = re.compile(r"[a-z0-9]+")


def finding_text(kind: str, value: str) -> str:
    kind = kind.strip().lower().replace(" ", "_")
    return f"{kind}: {value.strip()}" if kind else value.strip()


def sentence(text: str) -> str:
    text = text.strip()
    return text if text.endswith((".", "?", "!")) else f"{text}."


def condition_query(condition: str, findings: Sequence[str], population: str | None = None) -> str:
    """ "Malaria. symptom: fever 3 days. medical_history: pregnant first trimester." (seed 004)."""
    parts = [sentence(condition)] + [sentence(f) for f in findings if f.strip()]
    if population and population.strip():
        parts.append(sentence(f"population: {population.strip()}"))
    return " ".join(parts)


def plan_question(condition: str, findings: Sequence[str], population: str | None = None) -> str:
    described = "; ".join(f for f in findings if f.strip())
    who = f" ({population.strip()})" if population and population.strip() else ""
    return (
        f"What do the guidelines recommend for a patient{who} with {condition.strip()}"
        + (f" and these findings: {described}" if described else "")
        + "? Give an assessment and plan."
    )


@dataclass
class PlanItem:
    text: str
    citation_ids: list[str] = field(default_factory=list)
    sections: list[str] = field(default_factory=list)


def _overlap(a: str, b: str) -> float:
    wa, wb = set(_WORD.findall(a.lower())), set(_WORD.findall(b.lower()))
    return len(wa & wb) / max(1, len(wa))


def attribute(text: str, hits: Sequence[SearchHit]) -> list[PlanItem]:
    """Each sentence of the plan with the ids it cites and the title path of the section it rests on.

    Several chunks of one guideline chapter share a citation id, so the section is the chunk of a cited
    id whose text shares the most words with the sentence.
    """
    items = []
    pieces: list[str] = []
    for line in text.splitlines():
        for x in _SENTENCE.split(line.strip().removeprefix("- ")):
            x = x.strip()
            if pieces and x and not _BRACKET.sub("", x).strip():  # "... treatment. [NBK:1]": the citation
                pieces[-1] = f"{pieces[-1]} {x}"  # belongs to the sentence before it
            else:
                pieces.append(x)
    for s in pieces:
        if not s:
            continue
        ids = cited_ids(s)  # the one citation grammar (shared.citations)
        plain = _BRACKET.sub("", s).strip()
        sections: list[str] = []
        for cid in ids:
            cands = [h for h in hits if h.citation_id == cid]
            if cands:
                best = max(cands, key=lambda h: _overlap(plain, h.text))
                path = best.section or best.title
                if path not in sections:
                    sections.append(path)
        if plain and not plain.lower().startswith("extractive answer"):
            items.append(PlanItem(plain, ids, sections))
    return items
