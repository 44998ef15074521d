"""The workflows search the guideline sources the source registry names (``shared.sources.guideline_sources``),
not a source written into them: a second guideline source is searched without a change to any workflow."""

from __future__ import annotations

import dataclasses

import pytest

from services.gateway.workflows.query import QueryRequest, QueryTools
from shared.sources import SOURCES, guideline_sources
from shared.sources.pmc import PMC
from tests.unit.workflows.conftest import build, client


@pytest.fixture
def _pmc_holds_guidelines(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(SOURCES, "pmc", dataclasses.replace(PMC, guidelines=True))
    assert guideline_sources() == ["pmc", "bookshelf"]


@pytest.mark.usefixtures("_pmc_holds_guidelines")
async def test_every_guideline_search_asks_for_the_registrys_guideline_sources() -> None:
    app, service, backend = build(mesh={"Malaria": 3})
    recommend = {"condition": "Malaria", "findings": [{"kind": "symptom", "value": "fever 3 days"}]}
    async with client(app) as http:
        assert (await http.post("/v1/guidelines/recommend", json=recommend)).status_code == 200
        searched = [backend.retrievals[-1].filters.sources]
        question = {"question": "What do guidelines recommend for malaria?"}
        assert (await http.post("/v1/query", json=question)).status_code == 200
        searched.append(next(r.filters.sources for r in backend.retrievals[1:] if r.filters.sources))
    await QueryTools(service, QueryRequest(question="malaria?"), "t").get_guideline("Malaria", ["symptom: fever"])
    searched.append(backend.retrievals[-1].filters.sources)
    assert searched == [["pmc", "bookshelf"]] * 3
