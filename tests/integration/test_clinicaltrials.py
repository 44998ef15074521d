"""ClinicalTrials.gov through the running services: ``POST /v1/ingest`` with ``source: clinicaltrials`` -> the
fetcher searches the fake registry (tests/fakes/clinicaltrials_server.py) and fetches the studies -> parsed,
chunked by section, embedded -> found by search, selected by the trial filters, cited ``[NCT:...]`` in an
answer (the session's synthesizer is extractive) with the citation verified.

The test's studies are taken away at its end, so the session's other tests see the corpus they expect.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.integration.conftest import Stack
from tests.integration.db import db_fetch

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TIMEOUT = 150.0
WITH_RESULTS, RECRUITING = "NCT04000001", "NCT05000002"


@pytest.fixture
def trials(stack: Stack) -> Iterator[Stack]:
    fake = stack.trials
    assert fake is not None
    fake.requests.clear()  # the session's fake: earlier modules (the API fuzzing) may have asked it already
    fake.add_fixture(WITH_RESULTS)
    fake.add_fixture(RECRUITING)
    try:
        yield stack
    finally:
        fake.studies.clear()
        url = stack.infra.postgres.url
        rows = db_fetch(url, "DELETE FROM documents WHERE source = 'clinicaltrials' RETURNING document_id")
        ids = [r["document_id"] for r in rows]
        db_fetch(url, "DELETE FROM document_status WHERE document_id = ANY($1::text[])", ids)


def search(stack: Stack, query: str, filters: dict[str, Any]) -> set[str]:
    """The trials a search finds (by NCT number), at most one passage a study."""
    body = {
        "query": query,
        "top_k": 20,
        "top_n": 10,
        "filters": {"sources": ["clinicaltrials"], "max_chunks_per_document": 1, **filters},
    }
    with stack.http() as http:
        r = http.post("/v1/search", json=body)
    assert r.status_code == 200, r.text
    hits: list[dict[str, Any]] = r.json()["hits"]
    assert all(h["url"] == f"https://clinicaltrials.gov/study/{h['source_id']}" for h in hits), hits
    return {str(h["source_id"]) for h in hits}


METFORMIN = "metformin glycated haemoglobin HbA1c placebo"
SEMAGLUTIDE = "semaglutide obesity body weight"


def test_a_trial_is_ingested_found_filtered_and_cited(trials: Stack) -> None:
    stack = trials
    with stack.http() as http:
        r = http.post("/v1/ingest", json={"source": "clinicaltrials", "query": "metformin"})
        assert r.status_code == 202, r.text
        status = stack.wait_job(r.json()["job_id"], timeout=TIMEOUT)
    assert status["done"] and status["state"] == "done", status
    assert status["total"] == 2 and status["counts"]["embedded"] == 2 and not status["failures"], json.dumps(status)

    rows = db_fetch(
        stack.infra.postgres.url,
        "SELECT document_id, trial_phases, trial_status, has_results FROM documents WHERE source = 'clinicaltrials' "
        "ORDER BY document_id",
    )
    assert [(r["document_id"], r["trial_phases"], r["trial_status"], r["has_results"]) for r in rows] == [
        (f"clinicaltrials:{WITH_RESULTS}", ["PHASE3"], "COMPLETED", True),
        (f"clinicaltrials:{RECRUITING}", ["PHASE2"], "RECRUITING", False),
    ]
    requests = [params for path, params in stack.trials.requests if path == "/api/v2/studies"]  # type: ignore[union-attr]
    assert requests[0]["query.term"] == ["metformin"] and any("filter.ids" in p for p in requests)

    assert WITH_RESULTS in search(stack, METFORMIN, {})
    assert RECRUITING in search(stack, SEMAGLUTIDE, {})
    # each filter keeps its trials and drops the other one, whichever the query favours
    assert search(stack, SEMAGLUTIDE, {"trial_phase": ["PHASE2"]}) == {RECRUITING}
    assert search(stack, METFORMIN, {"trial_phase": ["PHASE2"]}) <= {RECRUITING}
    assert search(stack, METFORMIN, {"has_results": True}) == {WITH_RESULTS}
    assert search(stack, SEMAGLUTIDE, {"has_results": True}) <= {WITH_RESULTS}
    assert search(stack, SEMAGLUTIDE, {"has_results": False}) == {RECRUITING}
    assert search(stack, METFORMIN, {"trial_status": ["COMPLETED", "SUSPENDED"]}) == {WITH_RESULTS}
    assert search(stack, SEMAGLUTIDE, {"trial_status": ["RECRUITING"]}) == {RECRUITING}
    assert search(stack, METFORMIN, {"trial_status": ["WITHDRAWN"]}) == set()
    # a document that is no trial fails a trial filter: PubMed records have none of the columns
    with stack.http() as http:
        r = http.post(
            "/v1/search", json={"query": "metformin", "filters": {"has_results": False, "sources": ["pubmed"]}}
        )
    assert r.status_code == 200 and r.json()["hits"] == []

    question = "Does metformin lower HbA1c compared with placebo in early type 2 diabetes?"
    with stack.http() as http:
        r = http.post(
            "/v1/ask", json={"question": question, "filters": {"sources": ["clinicaltrials"], "has_results": True}}
        )
    assert r.status_code == 200, r.text
    answer = r.json()
    cited = f"NCT:{WITH_RESULTS}"
    assert answer["mode"] == "extractive", answer["mode"]
    assert f"[{cited}]" in answer["answer"]
    assert cited in answer["citation_check"]["verified"] and answer["citation_check"]["removed"] == []
    citation = next(c for c in answer["citations"] if c["citation_id"] == cited)
    assert citation["url"] == f"https://clinicaltrials.gov/study/{WITH_RESULTS}"


def test_a_wrong_nct_number_is_refused_and_the_cap_reaches_the_registry_s_search(trials: Stack) -> None:
    with trials.http() as http:
        bad = http.post("/v1/ingest", json={"source": "clinicaltrials", "ids": ["NCT123"]})
        assert bad.status_code == 422 and "NCT01234567" in bad.text
        r = http.post("/v1/ingest", json={"source": "clinicaltrials", "query": "metformin", "max_results": 1})
        assert r.status_code == 202
        status = trials.wait_job(r.json()["job_id"], timeout=TIMEOUT)
    assert status["done"] and status["total"] == 1, status  # the cap reaches the registry's search


def test_the_evidence_workflow_ingests_and_returns_the_pair_s_trials(trials: Stack) -> None:
    """``/v1/evidence`` with ``include_trials``: the registry is searched by condition and intervention, the
    study found is stored and returned in ``trials``, apart from the literature; the guideline recommendation
    lists it too (searched only)."""
    body = {"drug": "semaglutide", "disease": "obesity", "include_trials": True, "ingest": True, "wait_s": TIMEOUT}
    with trials.http() as http:
        r = http.post("/v1/evidence", json=body, timeout=TIMEOUT + 60)
    assert r.status_code == 200, r.text
    evidence = r.json()
    disease = evidence["disease"]["normalised"]
    fake = trials.trials
    assert fake is not None
    searches = [p for path, p in fake.requests if path == "/api/v2/studies" and "query.intr" in p]
    assert searches and all(p["query.intr"] == ["semaglutide"] and p["query.cond"] == [disease] for p in searches)
    assert evidence["ingestion"]["finished"], evidence["ingestion"]
    stored = db_fetch(trials.infra.postgres.url, "SELECT document_id FROM documents WHERE source = 'clinicaltrials'")
    assert [row["document_id"] for row in stored] == [f"clinicaltrials:{RECRUITING}"]  # the other is no match
    assert {h["source_id"] for h in evidence["trials"]} == {RECRUITING}
    assert all(h["url"] == f"https://clinicaltrials.gov/study/{RECRUITING}" for h in evidence["trials"])
    assert "trials" in [s["name"] for s in evidence["steps"]]
    assert all(h["source"] != "clinicaltrials" for h in evidence["sources"])

    asked = len(fake.requests)
    guideline = {"condition": "obesity", "findings": [{"kind": "sign", "value": "body weight"}], "include_trials": True}
    with trials.http() as http:
        r = http.post("/v1/guidelines/recommend", json=guideline)
    assert r.status_code == 200, r.text
    assert {h["source_id"] for h in r.json()["trials"]} == {RECRUITING}
    assert len(fake.requests) == asked  # searched what is stored: the registry was not asked
