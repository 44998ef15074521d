"""The structured evidence summary: the tool Claude fills, its checking, and the offline version.

Claude gets one tool, ``record_evidence_summary``, whose ``input_schema`` is generated from
:class:`shared.events.EvidenceSummary` (less the ``method`` field, which is ours), and is forced to call it.
Whatever it returns is checked like an answer's citations: ids that are not among the sources are removed
and reported, findings left without a source are dropped, counts are clamped to what was retrieved.

Offline, :func:`extractive_summary` builds the same shape without a model: the studies are the cited
sources, the findings are the quoted sentences, and the strength comes from the study designs alone.
"""

from __future__ import annotations

import copy
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from shared.citations import gate_summary, parse_id
from shared.events import EvidenceStrength, EvidenceSummary, KeyFinding
from shared.models import SearchHit

TOOL_NAME = "record_evidence_summary"

_HIGH = frozenset({"meta-analysis", "systematic-review", "guideline"})
_RCT = frozenset({"randomized-controlled-trial"})
_CONTROLLED = frozenset({"clinical-trial", "cohort", "case-control"})


def _inline_refs(schema: dict[str, Any]) -> dict[str, Any]:
    """Replace each ``$ref`` to ``$defs`` by the definition itself (a flat schema is the safest input)."""
    defs = schema.get("$defs", {})

    def walk(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                return walk(copy.deepcopy(defs[ref.removeprefix("#/$defs/")]))
            return {k: walk(v) for k, v in node.items() if k != "$defs"}
        if isinstance(node, list):
            return [walk(v) for v in node]
        return node

    out = walk(schema)
    assert isinstance(out, dict)
    return out


def summary_input_schema() -> dict[str, Any]:
    """JSON schema of the tool input: :class:`EvidenceSummary` without ``method``, refs inlined."""
    schema = _inline_refs(EvidenceSummary.model_json_schema())
    schema["properties"].pop("method", None)
    schema["required"] = [r for r in schema.get("required", []) if r != "method"]
    for name in ("summary", "study_count", "strength", "key_findings", "supporting_pmids"):
        if name not in schema["required"]:
            schema["required"].append(name)
    schema.pop("title", None)
    return schema


def summary_tool() -> dict[str, Any]:
    """The Claude tool definition (name, description, JSON schema) for the structured evidence summary."""
    return {
        "name": TOOL_NAME,
        "description": (
            "Record a structured summary of the evidence the numbered sources give on the question. Cite "
            "sources only by the ids shown for them (PMID digits, or the PMCID:/NBK: id for sources "
            "without a PMID). Use strength 'insufficient' when the sources do not answer the question."
        ),
        "input_schema": summary_input_schema(),
    }


@dataclass
class CheckedSummary:
    summary: EvidenceSummary
    removed: list[str] = field(default_factory=list)


def display_id(citation_id: str) -> str:
    """``PMID:123`` -> ``123`` (the summary lists PMIDs bare); other ids stay whole."""
    return citation_id.removeprefix("PMID:")


def _to_citation_id(raw: str) -> str:
    """A listed source id in canonical form (``123``, ``pmid 123``, ``[PMC5]``...); unreadable ones as given."""
    return parse_id(raw) or raw.strip()


def check_summary(
    data: dict[str, Any] | EvidenceSummary, hits: Sequence[SearchHit], method: str = "llm"
) -> CheckedSummary | None:
    """Validate a tool input against the model and the sources; None when it does not validate."""
    try:
        raw = data if isinstance(data, EvidenceSummary) else EvidenceSummary.model_validate({**data, "method": method})
    except ValidationError:
        return None
    known = {h.citation_id: h for h in hits}
    removed: list[str] = []

    def keep(ids: Iterable[str]) -> list[str]:
        out: dict[str, None] = {}
        for item in ids:
            cid = _to_citation_id(item)
            if cid in known:
                out[display_id(cid)] = None
            elif cid not in removed:
                removed.append(cid)
        return list(out)

    findings = []
    for f in raw.key_findings:
        ids = keep(f.supporting_pmids)
        if ids:  # a finding no given source supports is not evidence
            findings.append(KeyFinding(finding=f.finding, supporting_pmids=ids))
    supporting = keep(raw.supporting_pmids)
    for f in findings:
        for i in f.supporting_pmids:
            if i not in supporting:
                supporting.append(i)
    documents = {known[_to_citation_id(i)].document_id for i in supporting}
    strength: EvidenceStrength = raw.strength if supporting else "insufficient"
    summary, inline_removed = gate_summary(
        EvidenceSummary(
            summary=raw.summary,
            study_count=min(raw.study_count, len(documents)),
            study_types=raw.study_types,
            strength=strength,
            key_findings=findings,
            supporting_pmids=supporting,
            method=raw.method,
        ),
        known,
    )
    return CheckedSummary(summary, list(dict.fromkeys([*removed, *inline_removed])))


def strength_from_designs(study_types: Sequence[str | None]) -> EvidenceStrength:
    """A rough grade from study designs only (offline mode; no model has read the papers)."""
    if not study_types:
        return "insufficient"
    counts = Counter(t for t in study_types if t)
    if any(t in _HIGH for t in counts) or sum(counts[t] for t in _RCT) >= 2:
        return "high"
    if any(t in _RCT for t in counts) or sum(counts[t] for t in _CONTROLLED) >= 2:
        return "moderate"
    return "low"


def extractive_summary(findings: Sequence[tuple[str, SearchHit]]) -> EvidenceSummary:
    """The offline summary: the quoted sentences as findings, their sources as the studies."""
    if not findings:
        return insufficient_summary()
    by_doc: dict[str, SearchHit] = {}
    for _, hit in findings:
        by_doc.setdefault(hit.document_id, hit)
    designs = [h.study_type for h in by_doc.values()]
    types = sorted({t for t in designs if t})
    strength = strength_from_designs([t or "other" for t in designs])
    n = len(by_doc)
    kinds = f" ({', '.join(t.replace('-', ' ') for t in types)})" if types else ""
    text = (
        f"{n} retrieved {'study bears' if n == 1 else 'studies bear'} on the question{kinds}. The key "
        f"findings are sentences quoted from them; the strength ({strength}) is graded from the study "
        "designs alone, as no language model read the papers."
    )
    key = [KeyFinding(finding=s, supporting_pmids=[display_id(h.citation_id)]) for s, h in findings]
    supporting = list(dict.fromkeys(display_id(h.citation_id) for _, h in findings))
    return EvidenceSummary(
        summary=text,
        study_count=n,
        study_types=types,
        strength=strength,
        key_findings=key,
        supporting_pmids=supporting,
        method="extractive",
    )


def insufficient_summary(method: str = "extractive") -> EvidenceSummary:
    """The summary given when no source is relevant: strength ``insufficient``, no findings, made by ``method``."""
    return EvidenceSummary(
        summary="No retrieved source is relevant enough to answer the question.",
        study_count=0,
        study_types=[],
        strength="insufficient",
        key_findings=[],
        supporting_pmids=[],
        method="llm" if method == "llm" else "extractive",
    )
