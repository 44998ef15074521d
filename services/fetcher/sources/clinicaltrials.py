"""ClinicalTrials.gov as a source: discovery by search (terms, condition, intervention) and by NCT numbers,
fetching of the study records (API v2 JSON).

Units are NCT numbers; each study becomes one ``clinicaltrials-json`` document ``clinicaltrials:NCTnnnnnnnn``
(its record as the registry wrote it). A query goes to ``query.term``, the options ``condition`` and
``intervention`` to ``query.cond`` and ``query.intr``; a search takes at most ``min(max_results,
EVIDENTIA_CLINICALTRIALS_MAX_RESULTS)`` studies. Ids that are no NCT number are logged and left out; studies
the registry does not return are reported to ``on_missing``.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence

from services.fetcher.clinicaltrials import ClinicalTrialsClient, StudySearch
from shared.db.jobs import dedupe
from shared.events import CONDITION_OPTION, INTERVENTION_OPTION, DocumentFetched, SourceRequest
from shared.settings import ClinicalTrialsSettings
from shared.sources import SourceRule
from shared.sources.clinicaltrials import CLINICALTRIALS

log = logging.getLogger(__name__)

#: The format of a study record on ``documents.fetched`` (the parser's ``services.parser.clinicaltrials``).
FORMAT = "clinicaltrials-json"

OnMissing = Callable[[dict[str, str]], Awaitable[None]]


def _option(request: SourceRequest, name: str) -> str | None:
    value = request.options.get(name)
    return value.strip() or None if isinstance(value, str) else None


class ClinicalTrialsSource:
    """ClinicalTrials.gov on top of :class:`services.fetcher.clinicaltrials.ClinicalTrialsClient`."""

    def __init__(
        self, client: ClinicalTrialsClient, settings: ClinicalTrialsSettings, on_missing: OnMissing | None = None
    ) -> None:
        self.client = client
        self.settings = settings
        self.on_missing = on_missing

    @property
    def rule(self) -> SourceRule:
        return CLINICALTRIALS

    async def discover(self, request: SourceRequest, *, max_results: int, refresh: bool) -> list[str]:
        """The NCT numbers of the search (if the request has one), then the given ones, without repeats."""
        found: list[str] = []
        search = StudySearch(
            term=request.query,
            condition=_option(request, CONDITION_OPTION),
            intervention=_option(request, INTERVENTION_OPTION),
        )
        if search.params():
            found += await self.client.search(search, min(max_results, self.settings.max_results))
        given = [CLINICALTRIALS.canonical(i) for i in request.ids]
        bad = [i for i in given if not CLINICALTRIALS.valid(i)]
        if bad:
            log.warning("invalid NCT numbers ignored", extra={"ids": bad[:20]})
        return dedupe(found + [i for i in given if CLINICALTRIALS.valid(i)])

    async def fetch(
        self, units: Sequence[str], *, job_id: str | None = None, trace_id: str | None = None
    ) -> AsyncIterator[DocumentFetched]:
        """One ``clinicaltrials-json`` event per study the registry returns, in batches."""
        extra = {"trace_id": trace_id} if trace_id else {}
        async for batch in self.client.studies(list(units)):
            for nct, text in batch.studies.items():
                yield DocumentFetched(
                    document_id=CLINICALTRIALS.document_id(nct),
                    source="clinicaltrials",
                    source_id=nct,
                    format=FORMAT,
                    content=text,
                    job_id=job_id,
                    **extra,
                )
            problems = {n: "not found at ClinicalTrials.gov" for n in batch.missing} | batch.refused
            if problems:
                log.warning("studies not fetched", extra={"problems": dict(list(problems.items())[:20])})
                if self.on_missing is not None:
                    await self.on_missing(problems)

    def identify(self, event: DocumentFetched) -> list[str]:
        return [event.document_id]
