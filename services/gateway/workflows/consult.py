"""The guideline consultation workflow (``POST /v1/guidelines/consult``): an interview in, typed clinical
findings and a working diagnosis out; the guideline recommendation (:mod:`.recommend`) only once a diagnosis
is known. Claude's ``extract_findings`` step extracts the findings and states the diagnosis with a key; the
documented rules (:mod:`services.gateway.intelligence.consult`) do offline, where the caller gives the diagnosis.
"""

from __future__ import annotations

import time
from typing import Literal

from fastapi import HTTPException
from pydantic import BaseModel, ConfigDict, Field, model_validator

from services.gateway.intelligence.consult import (
    ClinicalFinding,
    llm_findings,
    recommend_kind,
    rule_findings,
    rule_questions,
)
from services.gateway.schemas.common import Metered
from services.gateway.workflows.base import ContextDep, Run, Workflow, metered, workflow_router
from services.gateway.workflows.recommend import Finding, GuidelineRequest, GuidelineResponse, RecommendWorkflow
from shared.models import DEFAULT_TOP_K, DEFAULT_TOP_N, AnswerTopN, ClinicalFindingType, SearchMode, TopK
from shared.safety import DISCLAIMER

router = workflow_router()


class ConsultNeedsDiagnosis(ValueError):
    """A consultation that cannot go on: offline, no diagnosis given (HTTP 422 with this reason)."""


MAX_INTERVIEW_CHARS = 50_000


class InterviewMessage(BaseModel):
    model_config = ConfigDict(extra="forbid")

    role: Literal["user", "assistant"] = Field(
        description="user: the patient (or whoever answers for them); assistant: the interviewer."
    )
    content: str = Field(min_length=1, max_length=5000, description="What was said.")


class ConsultRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    messages: list[InterviewMessage] = Field(
        min_length=1,
        max_length=100,
        description=f"The interview so far, oldest first (at most {MAX_INTERVIEW_CHARS} characters in all).",
    )
    diagnosis: str | None = Field(
        None,
        min_length=1,
        max_length=300,
        description="The working diagnosis, if the caller has one: it is used as given. Required offline "
        "(no API key), where no model can state one.",
    )
    min_confidence: float = Field(
        0.6, ge=0, le=1, description="The model's working diagnosis is acted on only at this confidence (0-1) or above."
    )
    population: str | None = Field(None, max_length=200, description="e.g. 'adult', 'child under 5'.")
    top_k: TopK = DEFAULT_TOP_K
    top_n: AnswerTopN = DEFAULT_TOP_N
    mode: SearchMode = "hybrid"

    @model_validator(mode="after")
    def _sizes(self) -> ConsultRequest:
        if all(not m.content.strip() for m in self.messages):
            raise ValueError("the interview is blank")
        if sum(len(m.content) for m in self.messages) > MAX_INTERVIEW_CHARS:
            raise ValueError(f"the interview is longer than {MAX_INTERVIEW_CHARS} characters")
        if self.diagnosis is not None and not self.diagnosis.strip():
            raise ValueError("diagnosis is blank")
        return self


class ConsultFinding(BaseModel):
    type: ClinicalFindingType
    text: str = Field(description="The finding in a few words, e.g. 'fever for 3 days'.")
    value: str | None = Field(None, description="Its value, if it has one: '3 days', '38.9 C', '28'.")
    source: Literal["llm", "rules"] = Field(
        description="llm: Claude extracted it (extract_findings step); rules: the documented offline rules."
    )


class ConsultResponse(Metered):
    status: Literal["needs_findings", "recommended"] = Field(
        description="recommended: a diagnosis was known and the guideline recommendation ran; needs_findings: "
        "no diagnosis yet, nothing was retrieved, `missing` says what to ask."
    )
    findings: list[ConsultFinding]
    extraction: Literal["llm", "rules"] = Field(description="Who extracted the findings.")
    diagnosis: str | None = Field(description="The working diagnosis (the caller's, or the model's).")
    confidence: float | None = Field(
        None, description="The model's confidence in its working diagnosis, 0 to 1 (None when the caller gave it)."
    )
    diagnosis_source: Literal["llm", "caller"] | None = Field(
        None, description="caller (the request's `diagnosis`) or llm (stated by Claude at `min_confidence` or above)."
    )
    missing: list[str] = Field(default_factory=list, description="What to ask next: findings still needed.")
    notes: list[str] = Field(default_factory=list)
    recommendation: GuidelineResponse | None = Field(
        None, description="The guideline recommendation (as `/v1/guidelines/recommend` answers), when it ran."
    )
    disclaimer: str
    timings_ms: dict[str, float] = Field(default_factory=dict)


class ConsultWorkflow(Workflow):
    @metered
    async def run(self, body: ConsultRequest) -> ConsultResponse:
        """Findings and the working diagnosis from the interview (Claude's ``extract_findings`` step, or the
        documented rules); the recommend flow only once a diagnosis is known: the caller's, or the model's at
        ``min_confidence`` or above. Otherwise ``needs_findings``, with what to ask, and nothing retrieved.

        Raises :class:`ConsultNeedsDiagnosis` offline (no model) when the caller gave no diagnosis."""
        run = Run()
        if body.diagnosis is None and not self.llm.available:
            raise ConsultNeedsDiagnosis(
                "offline (no ANTHROPIC_API_KEY), no model can state a diagnosis: give `diagnosis`; "
                "the findings are then extracted by the documented rules"
            )
        messages = [m.model_dump() for m in body.messages]
        notes: list[str] = []
        t0 = time.perf_counter()
        output = await self.llm.step("extract_findings", {"messages": messages}) if self.llm.available else None
        if self.llm.available:
            run.lap("extraction", t0)
        findings: list[ClinicalFinding]
        if output is not None:
            findings, extraction = llm_findings(output), "llm"
            stated = str(output.get("diagnosis") or "").strip() or None
            confidence: float | None = float(output.get("confidence") or 0.0)
            missing = [str(q) for q in output.get("missing") or []]
        else:
            findings, extraction, stated, confidence = rule_findings(messages), "rules", None, None
            missing = rule_questions(findings)
            if self.llm.available:
                notes.append("the model's extraction failed: the findings are the documented rules'")
        diagnosis, source = stated, "llm" if stated else None
        if body.diagnosis is not None:
            if stated and stated.lower() != body.diagnosis.strip().lower():
                notes.append(f"the model's working diagnosis was {stated} ({confidence:.2f}); the caller's is used")
            diagnosis, source, confidence = body.diagnosis.strip(), "caller", None
        elif stated and (confidence or 0.0) < body.min_confidence:
            notes.append(f"working diagnosis {stated} at confidence {confidence:.2f}, below {body.min_confidence}")
            missing = missing or [f"What findings would confirm or rule out {stated}?"]
            source = None
        out = [ConsultFinding(type=f.type, text=f.text, value=f.value, source=f.source) for f in findings]
        disclaimer = DISCLAIMER
        if source is None:  # no diagnosis: nothing is retrieved
            return ConsultResponse(
                status="needs_findings",
                findings=out,
                extraction=extraction,  # type: ignore[arg-type]
                diagnosis=stated,
                confidence=confidence,
                missing=missing or ["What is the working diagnosis?"],
                notes=notes,
                disclaimer=disclaimer,
                timings_ms=run.total(),
            )
        assert diagnosis is not None
        guideline = GuidelineRequest(
            condition=diagnosis,
            findings=[Finding(kind=recommend_kind(f.type), value=f.text) for f in findings][:50],
            population=body.population,
            top_k=body.top_k,
            top_n=body.top_n,
            mode=body.mode,
        )
        recommendation = await RecommendWorkflow(self.ctx).recommend(guideline)
        run.timings["recommendation"] = recommendation.timings_ms.get("total", 0.0)
        return ConsultResponse(
            status="recommended",
            findings=out,
            extraction=extraction,  # type: ignore[arg-type]
            diagnosis=diagnosis,
            confidence=confidence,
            diagnosis_source=source,  # type: ignore[arg-type]
            missing=missing,
            notes=notes,
            recommendation=recommendation,
            disclaimer=recommendation.disclaimer,
            timings_ms=run.total(),
        )


@router.post(
    "/v1/guidelines/consult",
    response_model=ConsultResponse,
    summary="Guideline consultation: an interview -> typed findings and a working diagnosis -> the guideline "
    "recommendation once a diagnosis is known (else what to ask)",
    responses={422: {"description": "A malformed interview, or offline without `diagnosis`."}},
)
async def consult(body: ConsultRequest, ctx: ContextDep) -> ConsultResponse:
    try:
        return await ConsultWorkflow(ctx).run(body)
    except ConsultNeedsDiagnosis as exc:
        raise HTTPException(422, str(exc)) from exc
