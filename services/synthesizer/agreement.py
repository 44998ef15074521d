"""Where the sources of an answer agree and disagree: each cited source labelled against the main finding.

In LLM mode, for an answer citing two or more sources, one forced tool call (``record_source_agreement``, the
answer's model) states the answer's main finding and labels each cited source ``supports``, ``contradicts``,
``mixed`` or ``not_addressed``. Its input is strictly checked (:func:`checked_agreement`): a label counts only for
an id among the answer's cited sources, once, with one of the four labels; every other label is dropped and
counted. When sources contradict the finding or are mixed on it, the answer says so in a closing sentence
(:func:`disagreement_note`). Offline, for a single source, or when the call gives no valid label, the reply's
agreement has no labels and says why: none is guessed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from shared.citations import parse_id
from shared.events import (
    AGREEMENT_LABELS,
    Agreement,
    AgreementCounts,
    AgreementLabel,
    Citation,
    SourceAgreement,
)

AGREEMENT_TOOL = "record_source_agreement"
OFFLINE = "No language model is configured (no ANTHROPIC_API_KEY): sources are not labelled, and none is guessed."
SINGLE = "The answer cites fewer than two sources: there is nothing to compare."
FAILED = "The labelling call failed or gave no valid label: sources are not labelled, and none is guessed."


def agreement_tool() -> dict[str, Any]:
    """The Claude tool definition (name, description, JSON schema) for the main finding and per-source labels."""
    return {
        "name": AGREEMENT_TOOL,
        "description": "Record the answer's main finding and how each given source stands to it.",
        "input_schema": {
            "type": "object",
            "properties": {
                "main_finding": {"type": "string", "description": "The answer's main finding, in one sentence."},
                "labels": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "id": {"type": "string", "description": "The source's id attribute, e.g. PMID:12345678."},
                            "label": {"type": "string", "enum": list(AGREEMENT_LABELS)},
                            "reason": {"type": "string", "description": "Why, in one short line."},
                        },
                        "required": ["id", "label"],
                    },
                },
            },
            "required": ["main_finding", "labels"],
        },
    }


def unlabelled(status: str, reason: str) -> Agreement:
    """An agreement without labels (``offline``, ``single-source``, ``failed``) saying why."""
    return Agreement(status=status, reason=reason)  # type: ignore[arg-type]


def checked_agreement(data: dict[str, Any] | None, citations: Sequence[Citation], model: str | None) -> Agreement:
    """The tool input ``data`` checked against the answer's ``citations``: labels kept only for their ids (each
    once, a valid label), in number order; the rest dropped and counted. No valid label: status ``failed``."""
    if not isinstance(data, dict):
        return unlabelled("failed", FAILED).model_copy(update={"model": model})
    numbers = {c.citation_id: c.number for c in citations}
    raw = data.get("labels")
    items = raw if isinstance(raw, list) else []
    kept: dict[str, SourceAgreement] = {}
    dropped = 0
    for item in items:
        if not isinstance(item, dict):
            dropped += 1
            continue
        cid = parse_id(str(item.get("id", "")))
        label = item.get("label")
        if cid is None or cid not in numbers or cid in kept or label not in AGREEMENT_LABELS:
            dropped += 1
            continue
        reason = item.get("reason")
        kept[cid] = SourceAgreement(
            citation_id=cid,
            number=numbers[cid],
            label=label,
            reason=str(reason)[:500] if isinstance(reason, str) and reason.strip() else None,
        )
    if not kept:
        return Agreement(status="failed", reason=FAILED, dropped=dropped, model=model)
    labels = sorted(kept.values(), key=lambda a: a.number or 0)
    counts = AgreementCounts(**{name: sum(a.label == name for a in labels) for name in AGREEMENT_LABELS})
    finding = data.get("main_finding")
    return Agreement(
        status="labelled",
        main_finding=str(finding).strip()[:1000] if isinstance(finding, str) and finding.strip() else None,
        labels=labels,
        counts=counts,
        disagree=counts.contradicts > 0 or counts.mixed > 0,
        unlabelled=[c.citation_id for c in citations if c.citation_id not in kept],
        dropped=dropped,
        model=model,
    )


_PHRASES: tuple[tuple[AgreementLabel, str, str], ...] = (
    ("supports", "supports it", "support it"),
    ("contradicts", "contradicts it", "contradict it"),
    ("mixed", "is mixed", "are mixed"),
)


def disagreement_note(agreement: Agreement) -> tuple[str, str] | None:
    """The sentence that says plainly that the sources disagree, citing them by id and by display number; None
    when they do not."""
    if not agreement.disagree:
        return None
    by_ids, by_numbers = [], []
    for label, one, many in _PHRASES:
        group = [a for a in agreement.labels if a.label == label]
        if not group:
            continue
        verb = one if len(group) == 1 else many
        count = f"{len(group)} source{'s' if len(group) > 1 else ''} {verb}"
        by_ids.append(f"{count} [{', '.join(a.citation_id for a in group)}]")
        by_numbers.append(f"{count} " + "".join(f"[{a.number}]" for a in group))
    head = "Note: the sources disagree on this finding: "
    return head + _join(by_ids) + ".", head + _join(by_numbers) + "."


def _join(parts: list[str]) -> str:
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]
