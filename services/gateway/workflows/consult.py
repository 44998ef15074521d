"""The guideline consultation workflow (``POST /v1/guidelines/consult``): an interview in, typed clinical
findings and a working diagnosis out; the guideline recommendation (:mod:`.recommend`) only once a diagnosis
is known. Claude's ``extract_findings`` step extracts the findings and states the diagnosis with a key; the
documented rules (:mod:`services.gateway.intelligence.consult`) do offline, where the caller gives the diagnosis.

A consultation is stored (:mod:`services.gateway.store.consultations`) and continued turn by turn: a request
with ``consultation_id`` adds its messages to the stored interview, the findings accumulate
(:mod:`services.gateway.intelligence.consult_state`), and with a key the synthesizer's ``differentials`` step
ranks the differential diagnoses from all the findings so far. Each differential at
``EVIDENTIA_WORKFLOW_CONSULT_PLAN_MIN_CONFIDENCE`` or above, and each diagnosis the caller gave, gets its own
guideline plan (the recommend flow). Offline no differential is proposed: the caller's diagnoses are listed,
labelled ``caller``.
"""

from __future__ import annotations

import asyncio
import time
from typing import Literal

from fastapi import HTTPException, Response
from pydantic import BaseModel, ConfigDict, Field, model_validator

from services.gateway.deps import ConsultationStoreDep, DeletesAnyOwnerDep, OwnerDep
from services.gateway.intelligence.consult import (
    ClinicalFinding,
    llm_findings,
    recommend_kind,
    rule_findings,
    rule_questions,
)
from services.gateway.intelligence.consult_state import (
    ConsultationState,
    Differential,
    RecordedFinding,
    merge_diagnoses,
    merge_findings,
    model_differentials,
    step_findings,
    with_callers,
)
from services.gateway.schemas.common import Metered
from services.gateway.store.consultations import ConsultationConflict, ConsultationStore, new_consultation_id
from services.gateway.workflows.base import ContextDep, Run, Workflow, metered, workflow_router
from services.gateway.workflows.recommend import Finding, GuidelineRequest, GuidelineResponse, RecommendWorkflow
from shared import metrics
from shared.models import DEFAULT_TOP_K, DEFAULT_TOP_N, AnswerTopN, ClinicalFindingType, SearchMode, TopK
from shared.safety import DISCLAIMER

router = workflow_router()


class ConsultNeedsDiagnosis(ValueError):
    """A consultation that cannot go on: offline, no diagnosis given (HTTP 422 with this reason)."""


class ConsultationNotFound(LookupError):
    """No stored consultation the caller may continue has this id (HTTP 404 with this reason)."""


class InterviewTooLong(ValueError):
    """The stored interview with this turn's messages is longer than one consultation may be (HTTP 422)."""


MAX_INTERVIEW_CHARS = 50_000
MAX_INTERVIEW_MESSAGES = 100


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
        max_length=MAX_INTERVIEW_MESSAGES,
        description="The interview so far, oldest first; continuing a consultation (`consultation_id`), this "
        f"turn's messages only, added to the stored ones (at most {MAX_INTERVIEW_MESSAGES} messages and "
        f"{MAX_INTERVIEW_CHARS} characters in all).",
    )
    consultation_id: str | None = Field(
        None,
        min_length=1,
        max_length=64,
        pattern=r"^[A-Za-z0-9_-]+$",
        description="Continue this stored consultation (the `consultation_id` of an earlier response): its "
        "interview, findings and diagnoses are kept and this turn's added. Left out, a new consultation starts. "
        "404 when there is none the caller's key may continue.",
    )
    diagnosis: str | None = Field(
        None,
        min_length=1,
        max_length=300,
        description="The working diagnosis, if the caller has one: it is used as given, and kept for the "
        "consultation's later turns. Required offline (no API key), where no model can state one, unless an "
        "earlier turn of the consultation gave one.",
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
    turn: int = Field(1, ge=1, description="The consultation's turn that recorded it as it now reads.")


class ConsultDifferential(BaseModel):
    rank: int = Field(ge=1, description="1: the most likely (the model's by confidence, then the caller's).")
    diagnosis: str
    confidence: float | None = Field(description="The model's confidence, 0 to 1; None for the caller's diagnoses.")
    source: Literal["llm", "caller"] = Field(
        description="llm: proposed by Claude (the differentials step); caller: a diagnosis the caller gave."
    )
    supporting_findings: list[str] = Field(default_factory=list, description="The findings that point to it.")
    separating_findings: list[str] = Field(
        default_factory=list, description="What to ask or examine next to confirm it or tell it from the others."
    )
    planned: bool = Field(
        description="Whether it got its own guideline plan: the caller's always, the model's at the "
        "plan threshold (`plan_min_confidence`) or above."
    )
    recommendation: GuidelineResponse | None = Field(
        None, description="Its guideline plan (as `/v1/guidelines/recommend` answers), citing section title paths."
    )


class ConsultResponse(Metered):
    consultation_id: str = Field(description="Send it back as `consultation_id` to continue this consultation.")
    turn: int = Field(ge=1, description="This turn's number in the consultation (1: the first).")
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
    differentials: list[ConsultDifferential] = Field(
        default_factory=list,
        description="The ranked differential diagnoses from all the findings so far (with a key), then the "
        "caller's diagnoses; offline the caller's only.",
    )
    plan_min_confidence: float = Field(
        description="The confidence at which a model's differential gets its own plan "
        "(EVIDENTIA_WORKFLOW_CONSULT_PLAN_MIN_CONFIDENCE)."
    )
    notes: list[str] = Field(default_factory=list)
    recommendation: GuidelineResponse | None = Field(
        None, description="The guideline recommendation (as `/v1/guidelines/recommend` answers), when it ran."
    )
    disclaimer: str
    timings_ms: dict[str, float] = Field(default_factory=dict)


class ConsultWorkflow(Workflow):
    @metered
    async def run(self, body: ConsultRequest, store: ConsultationStore, owner: str | None) -> ConsultResponse:
        """One turn of a consultation (a new one, or the stored ``consultation_id`` continued): the findings of
        the whole interview so far (Claude's ``extract_findings`` step, or the documented rules) merged with the
        stored ones; the working diagnosis (the caller's, or the model's at ``min_confidence`` or above) and its
        recommendation; the ranked differentials (with a key) and the caller's diagnoses, each planned one with
        its own plan. The turn is stored last: a turn that fails stores nothing.

        Raises :class:`ConsultationNotFound` for an id the caller may not continue, :class:`InterviewTooLong`,
        :class:`ConsultNeedsDiagnosis` offline with no diagnosis given nor stored, and
        :class:`~services.gateway.store.consultations.ConsultationConflict` when another turn was stored meanwhile."""
        run = Run()
        state = await self._state(body, store, owner)
        read_turns, turn = state.turns, state.turns + 1
        new = [{**m.model_dump(), "turn": turn} for m in body.messages]
        interview = [*state.messages, *new]
        if len(interview) > MAX_INTERVIEW_MESSAGES or sum(len(m["content"]) for m in interview) > MAX_INTERVIEW_CHARS:
            raise InterviewTooLong(
                f"the consultation's interview would be longer than {MAX_INTERVIEW_MESSAGES} messages or "
                f"{MAX_INTERVIEW_CHARS} characters: start a new consultation"
            )
        diagnoses = merge_diagnoses(state.diagnoses, body.diagnosis)
        population = body.population or state.population
        if not diagnoses and not self.llm.available:
            raise ConsultNeedsDiagnosis(
                "offline (no ANTHROPIC_API_KEY), no model can state a diagnosis: give `diagnosis`; "
                "the findings are then extracted by the documented rules"
            )
        messages = [{"role": m["role"], "content": m["content"]} for m in interview]
        notes: list[str] = []
        t0 = time.perf_counter()
        output = await self.llm.step("extract_findings", {"messages": messages}) if self.llm.available else None
        if self.llm.available:
            run.lap("extraction", t0)
        extracted: list[ClinicalFinding]
        if output is not None:
            extracted, extraction = llm_findings(output), "llm"
            stated = str(output.get("diagnosis") or "").strip() or None
            confidence: float | None = float(output.get("confidence") or 0.0)
            missing = [str(q) for q in output.get("missing") or []]
        else:
            extracted, extraction, stated, confidence = rule_findings(messages), "rules", None, None
            missing = rule_questions(extracted)
            if self.llm.available:
                notes.append("the model's extraction failed: the findings are the documented rules'")
        findings = merge_findings(state.findings, extracted, turn)
        caller = body.diagnosis.strip() if body.diagnosis is not None else (diagnoses[-1] if diagnoses else None)
        diagnosis, source = stated, "llm" if stated else None
        if caller is not None:
            if stated and stated.lower() != caller.lower():
                notes.append(f"the model's working diagnosis was {stated} ({confidence:.2f}); the caller's is used")
            diagnosis, source, confidence = caller, "caller", None
        elif stated and (confidence or 0.0) < body.min_confidence:
            notes.append(f"working diagnosis {stated} at confidence {confidence:.2f}, below {body.min_confidence}")
            missing = missing or [f"What findings would confirm or rule out {stated}?"]
            source = None
        differentials = with_callers(await self._differentials(findings, population, run, notes), diagnoses)
        threshold = self.settings.workflow.consult_plan_min_confidence
        planned = [d.source == "caller" or (d.confidence or 0.0) >= threshold for d in differentials]
        wanted = [diagnosis] if source is not None and diagnosis else []
        wanted += [d.diagnosis for d, p in zip(differentials, planned, strict=True) if p]
        plans = await self._plans(wanted, findings, body, population, run)
        state.turns, state.messages, state.findings = turn, interview, findings
        state.diagnoses, state.differentials, state.population = diagnoses, differentials, population
        await store.save(state, read_turns)
        recommendation = plans.get(diagnosis.lower()) if source is not None and diagnosis else None
        return ConsultResponse(
            consultation_id=state.consultation_id,
            turn=turn,
            status="recommended" if recommendation is not None else "needs_findings",
            findings=[
                ConsultFinding(type=f.type, text=f.text, value=f.value, source=f.source, turn=f.turn) for f in findings
            ],
            extraction=extraction,  # type: ignore[arg-type]
            diagnosis=diagnosis if source is not None else stated,
            confidence=confidence,
            diagnosis_source=source,  # type: ignore[arg-type]
            missing=missing if source is not None else (missing or ["What is the working diagnosis?"]),
            differentials=[
                ConsultDifferential(
                    rank=i,
                    diagnosis=d.diagnosis,
                    confidence=d.confidence,
                    source=d.source,
                    supporting_findings=d.supporting,
                    separating_findings=d.separating,
                    planned=p,
                    recommendation=plans.get(d.diagnosis.lower()) if p else None,
                )
                for i, (d, p) in enumerate(zip(differentials, planned, strict=True), 1)
            ],
            plan_min_confidence=threshold,
            notes=notes,
            recommendation=recommendation,
            disclaimer=recommendation.disclaimer if recommendation is not None else DISCLAIMER,
            timings_ms=run.total(),
        )

    async def _state(self, body: ConsultRequest, store: ConsultationStore, owner: str | None) -> ConsultationState:
        if body.consultation_id is None:
            return ConsultationState(consultation_id=new_consultation_id(), owner=owner)
        state = await store.get(body.consultation_id, owner)
        if state is None:
            raise ConsultationNotFound(
                f"no consultation {body.consultation_id} to continue (unknown, or another API key's): "
                "leave `consultation_id` out to start one"
            )
        return state

    async def _differentials(
        self, findings: list[RecordedFinding], population: str | None, run: Run, notes: list[str]
    ) -> list[Differential]:
        """The model's ranked differentials from all the findings so far; none offline, without findings, or
        when the step failed or its output was malformed (said in ``notes``: nothing is guessed)."""
        if not self.llm.available:
            notes.append(
                "offline (no ANTHROPIC_API_KEY): no differential diagnosis is proposed; "
                "the differentials are the caller's diagnoses, as given"
            )
            return []
        if not findings:
            notes.append("no findings yet: no differential diagnosis is proposed")
            return []
        t0 = time.perf_counter()
        inputs = {"findings": step_findings(findings), "population": population}
        output = await self.llm.step("differentials", inputs)
        run.lap("differentials", t0)
        if output is None:
            notes.append("the model's differential step failed: the differentials are the caller's diagnoses only")
            return []
        return model_differentials(output, findings)

    async def _plans(
        self,
        diagnoses: list[str],
        findings: list[RecordedFinding],
        body: ConsultRequest,
        population: str | None,
        run: Run,
    ) -> dict[str, GuidelineResponse]:
        """One guideline plan per diagnosis (case ignored), the recommend flow run for each at once."""
        names: list[str] = []
        for d in diagnoses:
            if d.lower() not in {n.lower() for n in names}:
                names.append(d)
        if not names:
            return {}
        t0 = time.perf_counter()
        flow = RecommendWorkflow(self.ctx)
        given = [Finding(kind=recommend_kind(f.type), value=f.text) for f in findings][:50]
        answers = await asyncio.gather(
            *(
                flow.recommend(
                    GuidelineRequest(
                        condition=name,
                        findings=given,
                        population=population,
                        top_k=body.top_k,
                        top_n=body.top_n,
                        mode=body.mode,
                    )
                )
                for name in names
            )
        )
        run.lap("recommendation", t0)
        return {name.lower(): answer for name, answer in zip(names, answers, strict=True)}


@router.post(
    "/v1/guidelines/consult",
    response_model=ConsultResponse,
    summary="Guideline consultation, turn by turn: an interview -> accumulated findings, a working diagnosis and "
    "ranked differentials -> a guideline plan per diagnosis (else what to ask)",
    responses={
        404: {"description": "`consultation_id` names no consultation the caller's key may continue."},
        409: {"description": "Another turn of the consultation was stored meanwhile: send this turn again."},
        422: {"description": "A malformed interview, one grown too long, or offline without `diagnosis`."},
    },
)
async def consult(
    body: ConsultRequest, ctx: ContextDep, store: ConsultationStoreDep, owner: OwnerDep
) -> ConsultResponse:
    try:
        return await ConsultWorkflow(ctx).run(body, store, owner)
    except (ConsultNeedsDiagnosis, InterviewTooLong) as exc:
        raise HTTPException(422, str(exc)) from exc
    except ConsultationNotFound as exc:
        raise HTTPException(404, str(exc)) from exc
    except ConsultationConflict as exc:
        raise HTTPException(409, str(exc)) from exc


@router.delete(
    "/v1/guidelines/consult/{consultation_id}",
    status_code=204,
    response_class=Response,
    summary="Delete a stored consultation with its interview and findings (the key that started it, or one with "
    "the `admin` scope)",
    responses={404: {"description": "No such consultation, or not the caller's"}},
)
async def delete_consultation(
    consultation_id: str, store: ConsultationStoreDep, owner: OwnerDep, any_owner: DeletesAnyOwnerDep
) -> Response:
    if not await store.delete(consultation_id, owner, any_owner=any_owner):
        raise HTTPException(404, f"no consultation {consultation_id}")
    metrics.CONSULTATIONS_DELETED.labels("request").inc()
    return Response(status_code=204)
