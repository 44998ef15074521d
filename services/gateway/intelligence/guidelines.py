"""Guideline recommendations: condition + clinical findings -> guideline sections -> Assessment & Plan.

The query is the condition-findings :class:`shared.models.QueryForm` ("Malaria. symptom: fever 3 days.
medical_history: pregnant first trimester."; rendered by the retriever, which sends the text back): the
condition finds the guideline, the findings find the section. Only
guideline chunks (Bookshelf sources) are searched. The plan is the synthesizer's verified answer (Claude,
or extractive sentences offline), each sentence attributed to the guideline section it came from, shown
by its title path ("Guidelines for the treatment of malaria > Malaria in pregnancy > First trimester").

The Assessment is written by Claude from the retrieved sections when a key is set: the synthesizer's
``assessment`` step (the patient and the sections as delimited, escaped data blocks there); its
citations are verified against the sections (ids not among them are removed and reported). Offline, or when
the call fails, it is a template labelled as such (``assessment_mode: template``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from shared.citations import CitationVerifier, cited_ids
from shared.events import CitationCheck, LlmStepName
from shared.models import SearchHit
from shared.text import SENTENCE_BREAK, WORD_PIECE

_BRACKET = re.compile(r"\[[^\]]*\]")


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
    wa, wb = set(WORD_PIECE.findall(a.lower())), set(WORD_PIECE.findall(b.lower()))
    return len(wa & wb) / max(1, len(wa))


def attribute(text: str, hits: Sequence[SearchHit]) -> list[PlanItem]:
    """Each sentence of the plan with the ids it cites and the title path of the section it rests on.

    Several chunks of one guideline chapter share a citation id, so the section is the chunk of a cited
    id whose text shares the most words with the sentence.
    """
    items = []
    pieces: list[str] = []
    for line in text.splitlines():
        for x in SENTENCE_BREAK.split(line.strip().removeprefix("- ")):
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


# --- the Assessment -----------------------------------------------------------------------------------

AssessmentMode = Literal["llm", "template"]


class ToolLlm(Protocol):
    @property
    def available(self) -> bool: ...

    @property
    def model(self) -> str: ...

    async def step(self, name: LlmStepName, inputs: dict[str, Any]) -> dict[str, Any] | None: ...


@dataclass
class Assessment:
    text: str
    mode: AssessmentMode
    model: str | None = None
    check: CitationCheck = field(default_factory=CitationCheck)


def template_assessment(condition: str, findings: Sequence[str], population: str | None, top: str | None) -> Assessment:
    """The offline Assessment: a template, labelled as one."""
    described = "; ".join(findings) or "no findings given"
    who = f" ({population.strip()})" if population and population.strip() else ""
    if top:
        text = (
            f"Template assessment (no language model): {condition.strip()}{who} with {described}. "
            f"The guideline section that matches this patient best: {top}."
        )
    else:
        text = (
            f"Template assessment (no language model): {condition.strip()}{who} with {described}. No stored "
            "guideline section matches: ingest the relevant guidelines (Bookshelf) first."
        )
    return Assessment(text, "template")


async def write_assessment(
    llm: ToolLlm,
    condition: str,
    findings: Sequence[str],
    population: str | None,
    hits: Sequence[SearchHit],
) -> Assessment:
    """Claude's Assessment from the sections, citations verified; the labelled template without a model,
    without sections, or when the call fails or says nothing."""
    top = (hits[0].section or hits[0].title) if hits else None
    if not llm.available or not hits:
        return template_assessment(condition, findings, population, top)
    data = await llm.step(  # answer writing: the synthesizer runs it on the main model
        "assessment",
        {
            "condition": condition,
            "findings": list(findings),
            "population": population,
            "passages": [h.model_dump(mode="json") for h in hits],
        },
    )
    raw = str((data or {}).get("assessment") or "").strip()
    if not raw:
        return template_assessment(condition, findings, population, top)
    verified = CitationVerifier(hits).verify(raw)
    return Assessment(verified.text, "llm", llm.model, verified.check)
