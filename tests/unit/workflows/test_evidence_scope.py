"""``/v1/evidence`` fetches from NCBI only for a key with the ``ingest`` scope, and never more PMIDs a search
than the operator's ``EVIDENTIA_WORKFLOW_EVIDENCE_MAX_PER_QUERY``."""

from __future__ import annotations

import pytest

from services.gateway.security import key_digest
from shared.settings import GatewaySettings, WorkflowSettings
from tests.unit.workflows.conftest import build, client

READER, INGESTER = "reader-key-1234567890", "ingester-key-0987654321"
BODY = {"drug": "metformin", "disease": "polycystic ovary syndrome"}
CAP = WorkflowSettings().evidence_max_per_query  # type: ignore[call-arg]


def scoped() -> GatewaySettings:
    return GatewaySettings(api_key_hashes=f"{key_digest(READER)}, {key_digest(INGESTER)}:ingest")  # type: ignore[call-arg]


@pytest.mark.parametrize("path", ["/v1/evidence", "/v1/evidence/stream"])
async def test_a_read_key_asking_to_ingest_gets_403_and_starts_nothing(path: str) -> None:
    app, _, backend = build(gateway=scoped())
    async with client(app, READER) as reader:
        r = await reader.post(path, json={**BODY, "ingest": True})
    assert r.status_code == 403, r.text
    assert "`ingest` scope" in r.json()["detail"]
    assert backend.ingested == [] and backend.retrievals == []


async def test_a_read_key_searches_what_is_stored_by_default_an_ingest_key_fetches() -> None:
    app, _, backend = build(gateway=scoped())
    async with client(app, READER) as reader:
        r = await reader.post("/v1/evidence", json=BODY)
    assert r.status_code == 200, r.text
    fetch = next(s for s in r.json()["steps"] if s["name"] == "fetch")
    assert fetch["status"] == "skipped" and backend.ingested == [] and backend.retrievals  # searched, fetched none
    async with client(app, INGESTER) as ingester:
        r = await ingester.post("/v1/evidence", json=BODY)
        assert r.status_code == 200, r.text
        assert backend.ingested and all(n == CAP for _, n in backend.ingested)  # the operator's limit, by default
        ingested = len(backend.ingested)
        r = await ingester.post("/v1/evidence", json={**BODY, "ingest": False})
        assert r.status_code == 200 and len(backend.ingested) == ingested  # an ingest key may opt out


@pytest.mark.parametrize("path", ["/v1/evidence", "/v1/evidence/stream"])
async def test_max_per_query_over_the_operators_limit_gets_422_naming_it(path: str) -> None:
    app, _, backend = build(gateway=scoped())
    async with client(app, INGESTER) as ingester:
        r = await ingester.post(path, json={**BODY, "max_per_query": CAP + 1})
        assert r.status_code == 422, r.text
        assert "EVIDENTIA_WORKFLOW_EVIDENCE_MAX_PER_QUERY" in r.json()["detail"]
        assert backend.ingested == []
        r = await ingester.post("/v1/evidence", json={**BODY, "max_per_query": 7})
    assert r.status_code == 200 and backend.ingested and all(n == 7 for _, n in backend.ingested)
