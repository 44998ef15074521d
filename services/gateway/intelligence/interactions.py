"""The drug interaction check: what the current FDA labels of some drugs say of each other, with the strongest
literature beside it.

1. The drugs are named as RxNorm concepts (:class:`.rxnav.RxNavClient`): the name asked about, RxNorm's name,
   its brand names and its pharmacologic classes.
2. For each drug, the stored label of that drug (source ``fda_label``, the ``drugs`` filter on its names) is
   searched in the sections that state interactions (drug interactions, contraindications, boxed warning),
   with the other drugs' names as the query; a passage that names another drug, by any of its names or
   classes, is a finding, quoted around the name with the label's citation.
3. The literature (every other source) is searched for the pair; of the relevant passages that name every
   drug, the strongest (by evidence weight) come with the result.

4. At question time (a caller whose fetch mode allows it: :mod:`services.gateway.livefetch.interaction`), the
   labels of drugs with none stored are fetched from openFDA in one ingestion job, waited for within a bound
   and read (step 2); and when no stored literature passage names every drug, PubMed is searched for the pair
   by the live fetch runner and the literature searched again (step 3).

The verdict is one of three, never a guess: ``found`` (a label names the other drug), ``none_found`` (labels
were read and name none of the others; not proof of safety) and ``not_checked`` (fewer than two drugs, no
label of any of them could be read, or the search failed). Labels come from ingestion (``evidentia ingest
--source fda_label --query <drug>``) or the fetch at question time; a drug whose label could not be read is
named in the result with the reason.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Literal

from services.gateway.errors import new_error_id
from services.gateway.intelligence.rxnav import DrugConcept, RxNavClient
from services.gateway.livefetch.interaction import InteractionFetch
from services.gateway.livefetch.labels import LabelFetch
from services.gateway.schemas.common import FetchReport
from shared.events import RetrievalReply, RetrievalRequest
from shared.models import SearchFilters, SearchHit, relevant_hits, strongest_evidence_first
from shared.sources import SOURCES
from shared.sources.fdalabel import FDA_LABEL
from shared.sources.fdalabel_document import INTERACTION_SECTIONS

log = logging.getLogger(__name__)

Retrieve = Callable[[RetrievalRequest], Awaitable[RetrievalReply]]
Status = Literal["found", "none_found", "not_checked"]

#: The most drugs checked at once (each pair is read in both labels).
MAX_DRUGS = 4
#: Characters quoted on each side of the name a label passage mentions.
EXCERPT_CHARS = 220
#: Literature passages kept with the result.
LITERATURE_HITS = 2
NOT_STORED = "no FDA label is stored (ingest it with `evidentia ingest --source fda_label --query <drug>`)"
ADVICE = "Do not assume there is none: ask a pharmacist or consult a drug interaction reference."
_EPC = re.compile(r"\s*\[[A-Za-z]+\]\s*$")


def class_terms(classes: tuple[str, ...]) -> list[str]:
    """A drug's class names as a label writes them: ``Vitamin K Antagonist [EPC]`` -> ``vitamin k antagonist``."""
    return list(dict.fromkeys(_EPC.sub("", c).strip().lower() for c in classes if _EPC.sub("", c).strip()))


def mention(text: str, terms: list[str]) -> tuple[str, int, int] | None:
    """The first of ``terms`` (whole words, any case, a plural ``s`` allowed) in ``text``: (term, start, end)."""
    best: tuple[str, int, int] | None = None
    for term in terms:
        m = re.search(rf"(?<!\w){re.escape(term)}s?(?!\w)", text, flags=re.IGNORECASE)
        if m and (best is None or m.start() < best[1]):
            best = (term, m.start(), m.end())
    return best


def excerpt(text: str, start: int, end: int, width: int = EXCERPT_CHARS) -> str:
    """The text around ``text[start:end]``, cut at word boundaries, with ellipses where it was cut."""
    lo, hi = max(0, start - width), min(len(text), end + width)
    while lo > 0 and not text[lo - 1].isspace():
        lo += 1
    while hi < len(text) and not text[hi].isspace():
        hi -= 1
    return ("..." if lo > 0 else "") + text[lo:hi].strip() + ("..." if hi < len(text) else "")


@dataclass
class LabelFinding:
    """One label passage that names another drug: whose label, which drug (as ``term``), where, and what it says."""

    label_of: str
    other: str
    term: str
    section: str | None
    excerpt: str
    hit: SearchHit


@dataclass
class InteractionCheck:
    drugs: list[str]
    configured: bool
    """Whether RxNav is configured (drugs are named as RxNorm concepts; else looked up as given)."""
    status: Status = "not_checked"
    concepts: list[DrugConcept] = field(default_factory=list)
    findings: list[LabelFinding] = field(default_factory=list)
    labels_read: dict[str, list[str]] = field(default_factory=dict)
    """Drug -> the citation ids of its labels that were read."""
    missing: list[str] = field(default_factory=list)
    """Drugs with no label that could be read."""
    missing_reasons: dict[str, str] = field(default_factory=dict)
    """Drug in ``missing`` -> why its label was not read."""
    label_fetch: LabelFetch | None = None
    """The labels fetched from openFDA at question time (None: none fetched)."""
    literature_fetch: FetchReport | None = None
    """PubMed searched for the pair at question time (None: not searched)."""
    literature: list[SearchHit] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    reason: str | None = None
    """Why the check could not be made (``not_checked``)."""

    def sources(self) -> list[SearchHit]:
        """The passages the result rests on: each finding's label passage, then the literature."""
        seen: set[str] = set()
        out = []
        for hit in [f.hit for f in self.findings] + self.literature:
            if hit.chunk_id not in seen:
                seen.add(hit.chunk_id)
                out.append(hit)
        return out

    def text(self) -> str:
        """The result in words. It names no citation id or link (an answer may cite only its verified
        passages, and ``/v1/ask`` scrubs ids from it): those are in the findings and :meth:`sources`."""
        lines = list(self.notes)
        if self.status == "not_checked":
            lines.append(f"The drug interaction could not be checked: {self.reason}. {ADVICE}")
        elif self.status == "none_found":
            read = " and ".join(self.labels_read)
            lines.append(
                f"No labelled interaction found: the current FDA label of {read} (drug interactions, "
                "contraindications, boxed warning) names none of the other drugs. That is not proof there is none."
            )
        else:
            lines.append("Labelled interactions found:")
            for f in self.findings:
                where = f" ({f.section})" if f.section else ""
                lines.append(f'- The FDA label of {f.label_of}{where} names {f.other} (as "{f.term}"): "{f.excerpt}"')
        if self.missing and self.status != "not_checked":
            for drug in self.missing:
                lines.append(f"The FDA label of {drug} was not read: {self.missing_reasons.get(drug, NOT_STORED)}.")
        if self.literature:
            best = self.literature[0]
            kind = f" ({best.study_type})" if best.study_type else ""
            lines.append(f"Strongest literature evidence: {best.title}{kind}.")
        elif self.status != "not_checked":
            lines.append("No literature passage on the pair was found in the store.")
        return "\n".join(lines)


def _literature_sources() -> list[str]:
    return [name for name in SOURCES if name != FDA_LABEL.name]


class InteractionChecker:
    """The check on the gateway's RxNav client and a retrieval (the caller's: the workflows' backend or the
    answer path's Kafka client)."""

    def __init__(
        self,
        rxnav: RxNavClient,
        retrieve: Retrieve,
        *,
        trace_id: str,
        passages: int = 8,
        min_score: float = 0.0,
        fetch: InteractionFetch | None = None,
    ) -> None:
        self.rxnav = rxnav
        self.fetch = fetch
        self.retrieve = retrieve
        self.trace_id = trace_id
        self.passages = passages
        self.min_score = min_score

    async def check(self, drugs: list[str]) -> InteractionCheck:
        normalised = await self.rxnav.normalise(drugs[:MAX_DRUGS])
        out = InteractionCheck([c.query for c in normalised.concepts], self.rxnav.configured)
        out.concepts = normalised.concepts
        if normalised.error:
            out.notes.append(f"{normalised.error}; the drugs were looked up by the names given.")
        if len(out.concepts) < 2:
            out.reason = "fewer than two drugs were named"
            return out
        try:
            for concept in out.concepts:
                await self._read_label(out, concept, self._others(out, concept))
            if out.missing and self.fetch is not None:
                await self._fetch_labels(out)
            out.missing_reasons = {d: out.missing_reasons.get(d, NOT_STORED) for d in out.missing}
            out.literature = await self._literature(out.concepts)
            if not out.literature and self.fetch is not None:
                out.literature_fetch = await self.fetch.literature(
                    [c.name or c.query for c in out.concepts], self.trace_id
                )
                if out.literature_fetch is not None and out.literature_fetch.ingested:
                    out.literature = await self._literature(out.concepts)
        except Exception as exc:  # the store or the retriever failed: said, never taken for "no interaction"
            error_id = new_error_id()
            log.warning("interaction check failed", extra={"error": repr(exc)[:300], "error_id": error_id})
            out.status, out.reason = "not_checked", f"the search failed ({type(exc).__name__}; error id {error_id})"
            return out
        if out.findings:
            out.status = "found"
        elif out.labels_read:
            out.status = "none_found"
        else:
            out.status = "not_checked"
            fetched = ", and none could be fetched from openFDA" if out.label_fetch is not None else ""
            out.reason = f"no FDA label is stored for {' or '.join(out.drugs)}{fetched}"
        return out

    @staticmethod
    def _others(out: InteractionCheck, concept: DrugConcept) -> list[DrugConcept]:
        return [c for c in out.concepts if c is not concept]

    async def _fetch_labels(self, out: InteractionCheck) -> None:
        """The labels of ``out.missing`` fetched (one job, a bounded wait) and read; those still missing keep
        the fetch's reason."""
        assert self.fetch is not None
        wanted = [c for c in out.concepts if c.query in out.missing]
        out.label_fetch = await self.fetch.labels([c.name or c.query for c in wanted], self.trace_id)
        out.missing = [d for d in out.missing if d not in {c.query for c in wanted}]
        for concept in wanted:
            await self._read_label(out, concept, self._others(out, concept))
        for drug in out.missing:
            out.missing_reasons[drug] = out.label_fetch.why_missing()

    async def _search(self, query: str, filters: SearchFilters, top_n: int) -> list[SearchHit]:
        reply = await self.retrieve(
            RetrievalRequest(trace_id=self.trace_id, query=query[:2000], top_n=top_n, filters=filters)
        )
        if reply.error is not None:
            raise RuntimeError(f"retrieval failed: {reply.error.message}")
        return reply.hits

    async def _read_label(self, out: InteractionCheck, concept: DrugConcept, others: list[DrugConcept]) -> None:
        names = concept.names[:20]
        terms = {o.query: [*o.names, *class_terms(o.classes)] for o in others}
        query = " ".join(t for ts in terms.values() for t in ts) or "drug interactions"
        label = SearchFilters(sources=[FDA_LABEL.name], drugs=names)  # type: ignore[list-item]
        hits = await self._search(
            query, label.model_copy(update={"sections": list(INTERACTION_SECTIONS)}), self.passages
        )
        if not hits:  # no interaction section matched: is there a label at all?
            hits = await self._search(concept.query, label, 1)
            if not hits:
                out.missing.append(concept.query)
                return
            out.labels_read[concept.query] = list(dict.fromkeys(h.citation_id for h in hits))
            return
        out.labels_read[concept.query] = list(dict.fromkeys(h.citation_id for h in hits))
        for other, other_terms in terms.items():
            for hit in hits:
                found = mention(hit.text, other_terms)
                if found is not None:
                    term, start, end = found
                    out.findings.append(
                        LabelFinding(concept.query, other, term, hit.section, excerpt(hit.text, start, end), hit)
                    )
                    break  # one passage per drug pair and label: the first the search ranked

    async def _literature(self, concepts: list[DrugConcept]) -> list[SearchHit]:
        query = " ".join(c.name or c.query for c in concepts) + " drug interaction"
        hits = await self._search(query, SearchFilters(sources=_literature_sources()), 10)  # type: ignore[arg-type]
        # Evidence on the pair: relevant passages that name every drug (by any of its names).
        on_pair = [
            h
            for h in relevant_hits(hits, self.min_score)
            if all(mention(f"{h.title}\n{h.text}", c.names) for c in concepts)
        ]
        return strongest_evidence_first(on_pair)[:LITERATURE_HITS]
