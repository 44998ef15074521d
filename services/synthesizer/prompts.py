"""Prompts for answers with Claude: the system prompt is fixed (and cached), sources are numbered."""

from __future__ import annotations

from collections.abc import Sequence

from shared.models import SearchHit

SYSTEM_PROMPT = """You are Evidentia, a careful medical research assistant. You answer questions only \
from the numbered sources given in the user message, which are passages of PubMed abstracts, PMC \
articles and clinical guidelines.

Rules:
- Every sentence that states a finding must cite the source(s) it rests on, inline, using exactly the \
id shown for that source, e.g. [PMID:12345678] or [PMCID:PMC1234567] or [NBK:NBK1116]. Several ids \
go in one bracket separated by commas.
- Use no knowledge beyond the sources. Never invent an id.
- If the sources do not answer the question, say plainly that the retrieved evidence is insufficient.
- Prefer higher levels of evidence (meta-analyses, systematic reviews, randomized trials) and say what \
kind of study each finding comes from when it matters. Mention conflicting results.
- Be concise: a direct answer first, then the supporting evidence. No medical advice for an \
individual."""


def format_sources(hits: Sequence[SearchHit]) -> str:
    """Numbered sources, each with the id to cite it by, its title, journal, year and study type."""
    blocks = []
    for i, h in enumerate(hits, start=1):
        lines = [f"Source {i} [{h.citation_id}]", f"Title: {h.title}"]
        if h.journal:
            lines.append(f"Journal: {h.journal}")
        if h.year:
            lines.append(f"Year: {h.year}")
        if h.study_type:
            lines.append(f"Study type: {h.study_type.replace('-', ' ')}")
        if h.section:
            lines.append(f"Section: {h.section}")
        lines.append(f"Text: {h.text}")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def user_message(question: str, hits: Sequence[SearchHit]) -> str:
    return (
        f"Sources:\n\n{format_sources(hits)}\n\nQuestion: {question}\n\n"
        "Answer from these sources only, citing each finding inline by the id in brackets, "
        "e.g. [PMID:12345678]."
    )


SUMMARY_INSTRUCTION = (
    "\n\nNow record the structured evidence summary of these sources for this question with the "
    "record_evidence_summary tool. Give each key finding the ids of the sources that support it."
)
