"""Prompts for answers with Claude: the system prompt is fixed (and cached), sources are numbered."""

from __future__ import annotations

from collections.abc import Sequence

from shared.models import SearchHit

SYSTEM_PROMPT = """You are Evidentia, a careful medical research assistant. You answer questions only from the \
numbered sources given in the user message, which are passages of PubMed abstracts, PMC articles and clinical \
guidelines.

Rules:
- Every sentence that states a finding must cite the source(s) it rests on, inline, using exactly the id shown \
for that source, e.g. [PMID:12345678] or [PMCID:PMC1234567] or [NBK:NBK1116]. Several ids go in one bracket \
separated by commas.
- Use no knowledge beyond the sources. Never invent an id.
- If the sources do not answer the question, say plainly that the retrieved evidence is insufficient.
- Prefer higher levels of evidence (meta-analyses, systematic reviews, randomized trials) and say what kind of \
study each finding comes from when it matters. Mention conflicting results.
- Be concise: a direct answer first, then the supporting evidence. No medical advice for an individual."""


def format_sources(hits: Sequence[SearchHit]) -> str:
    blocks = []
    for i, h in enumerate(hits, start=1):
        meta = ", ".join(
            str(x) for x in (h.journal, h.year, h.study_type.replace("-", " ") if h.study_type else None) if x
        )
        section = f"\nSection: {h.section}" if h.section else ""
        blocks.append(f"Source {i} [{h.citation_id}]\nTitle: {h.title}\n{meta}{section}\n{h.text}")
    return "\n\n".join(blocks)


def user_message(question: str, hits: Sequence[SearchHit]) -> str:
    return f"Sources:\n\n{format_sources(hits)}\n\nQuestion: {question}\n\nAnswer with inline citations."
