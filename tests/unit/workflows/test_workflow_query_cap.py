"""Every workflow route that renders a search query refuses one over the limits (422 naming them) before
anything is searched: ``/v1/query``, ``/v1/guidelines/recommend``, ``/v1/evidence``."""

from __future__ import annotations

import pytest

from tests.unit.workflows.conftest import build, client

MANY = " ".join(f"word{i}" for i in range(400))  # 400 terms, under 4,000 characters
BODIES = {
    "/v1/query": {"question": MANY},
    "/v1/guidelines/recommend": {
        "condition": "malaria",
        "findings": [{"kind": "symptom", "value": " ".join(f"w{i}" for i in range(80))}] * 50,
    },
    # each field within its length (200, 300 characters); the therapeutic query they make is over 250 terms
    "/v1/evidence": {"drug": " ".join("d" * 100), "disease": " ".join("x" * 150)},
}


@pytest.mark.parametrize("path", list(BODIES))
async def test_a_query_over_the_cap_gets_a_422_naming_the_limit_and_searches_nothing(path: str) -> None:
    app, _, backend = build()
    async with client(app) as http:
        r = await http.post(path, json=BODIES[path])
    assert r.status_code == 422, r.text
    assert "EVIDENTIA_RETRIEVAL_MAX_QUERY_TERMS" in r.text
    assert backend.retrievals == [] and backend.ingested == []
