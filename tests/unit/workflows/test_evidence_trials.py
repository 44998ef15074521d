"""``/v1/evidence`` with ``include_trials``: one more ingestion job at ClinicalTrials.gov for the pair (with
``ingest``), waited for with the others, then a search of the stored trials returned in ``trials``, apart from
the literature the summary is written from."""

from __future__ import annotations

import json
from typing import Any

from shared.events import CONDITION_OPTION, INTERVENTION_OPTION
from shared.models import SearchHit
from tests.unit.workflows.conftest import build, client

BODY = {"drug": "metformin", "disease": "Polycystic ovary syndrome, type 1"}


def trial_hit(nct: str, rank: int) -> SearchHit:
    return SearchHit(
        chunk_id=f"clinicaltrials:{nct}#summary#0",
        document_id=f"clinicaltrials:{nct}",
        source="clinicaltrials",
        source_id=nct,
        title=f"Metformin in polycystic ovary syndrome ({nct})",
        section="Brief summary",
        text="Metformin versus placebo in women with polycystic ovary syndrome.",
        score=1.0 / rank,
        rank=rank,
        url=f"https://clinicaltrials.gov/study/{nct}",
    )


async def test_include_trials_ingests_the_pair_at_clinicaltrials_and_returns_its_studies_apart() -> None:
    app, _, backend = build()
    backend.trial_hits = [trial_hit("NCT04000001", 1), trial_hit("NCT05000002", 2)]
    async with client(app) as http:
        r = await http.post("/v1/evidence", json={**BODY, "include_trials": True, "max_per_query": 7})
    assert r.status_code == 200, r.text
    body = r.json()
    assert [s["name"] for s in body["steps"]] == ["normalise", "expand", "fetch", "search", "trials", "synthesize"]
    [(source, max_results)] = backend.source_jobs
    assert source.source == "clinicaltrials" and source.query is None and not source.ids
    disease = body["disease"]["normalised"]
    assert source.options == {CONDITION_OPTION: disease, INTERVENTION_OPTION: "metformin"}
    assert max_results == 7
    # the trial job is waited for with the PubMed ones
    assert body["ingestion"]["jobs"] == [q["job_id"] for q in body["queries"]] + ["source-job-1"]
    trial_search = [q for q in backend.retrievals if q.filters.sources == ["clinicaltrials"]]
    assert len(trial_search) == 1
    form = trial_search[0].query_form
    assert form is not None and (form.drug, form.disease) == ("metformin", disease)
    assert [h["source_id"] for h in body["trials"]] == ["NCT04000001", "NCT05000002"]
    step = next(s for s in body["steps"] if s["name"] == "trials")
    assert step["data"]["nct_ids"] == ["NCT04000001", "NCT05000002"]
    # not mixed into the literature: neither the sources nor the passages synthesised hold a trial
    assert all(h["source"] != "clinicaltrials" for h in body["sources"])
    assert all(p.source != "clinicaltrials" for p in backend.syntheses[-1].passages)


async def test_include_trials_without_ingest_searches_the_stored_trials_only() -> None:
    app, _, backend = build()
    backend.trial_hits = [trial_hit("NCT04000001", 1)]
    async with client(app) as http:
        r = await http.post("/v1/evidence", json={**BODY, "include_trials": True, "ingest": False})
    assert r.status_code == 200, r.text
    assert backend.source_jobs == [] and backend.ingested == []
    assert [h["source_id"] for h in r.json()["trials"]] == ["NCT04000001"]


async def test_without_include_trials_nothing_of_clinicaltrials_is_touched() -> None:
    app, _, backend = build()
    backend.trial_hits = [trial_hit("NCT04000001", 1)]
    async with client(app) as http:
        r = await http.post("/v1/evidence", json=BODY)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["trials"] == [] and "trials" not in [s["name"] for s in body["steps"]]
    assert backend.source_jobs == []
    assert all(q.filters.sources != ["clinicaltrials"] for q in backend.retrievals)


async def test_the_stream_reports_the_trials_step() -> None:
    app, _, backend = build()
    backend.trial_hits = [trial_hit("NCT04000001", 1)]
    events: list[tuple[str, dict[str, Any]]] = []
    async with (
        client(app) as http,
        http.stream("POST", "/v1/evidence/stream", json={**BODY, "include_trials": True}) as r,
    ):
        assert r.status_code == 200
        name = ""
        async for line in r.aiter_lines():
            if line.startswith("event:"):
                name = line[6:].strip()
            elif line.startswith("data:"):
                events.append((name, json.loads(line[5:])))
    assert [d["status"] for n, d in events if n == "step" and d["name"] == "trials"] == ["running", "done"]
    result = [d for n, d in events if n == "result"]
    assert len(result) == 1
    assert [h["source_id"] for h in result[0]["trials"]] == ["NCT04000001"]


# --- the guideline recommendation: stored trials listed, nothing fetched ----------------------------------

GUIDELINE = {"condition": "malaria", "findings": [{"kind": "symptom", "value": "fever 3 days"}]}


async def test_recommend_with_include_trials_lists_the_stored_trials_and_fetches_nothing() -> None:
    app, _, backend = build()
    backend.trial_hits = [trial_hit("NCT04000001", 1)]
    async with client(app) as http:
        r = await http.post("/v1/guidelines/recommend", json={**GUIDELINE, "include_trials": True})
    assert r.status_code == 200, r.text
    body = r.json()
    assert [h["source_id"] for h in body["trials"]] == ["NCT04000001"]
    assert backend.source_jobs == [] and backend.ingested == []
    [trial_search] = [q for q in backend.retrievals if q.filters.sources == ["clinicaltrials"]]
    guideline_search = backend.retrievals[0]
    assert trial_search.query_form == guideline_search.query_form  # the same condition and findings
    assert all(not c["citation_id"].startswith("NCT") for c in body["citations"])  # the plan cites guidelines
    assert all(p.source != "clinicaltrials" for p in backend.syntheses[-1].passages)


async def test_recommend_without_include_trials_does_not_search_trials() -> None:
    app, _, backend = build()
    backend.trial_hits = [trial_hit("NCT04000001", 1)]
    async with client(app) as http:
        r = await http.post("/v1/guidelines/recommend", json=GUIDELINE)
    assert r.status_code == 200, r.text
    assert r.json()["trials"] == []
    assert all(q.filters.sources != ["clinicaltrials"] for q in backend.retrievals)
