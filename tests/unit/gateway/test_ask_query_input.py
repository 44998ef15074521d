"""The medical assistant's ``QueryInput`` fields on ``/v1/ask`` and its stream: ``language``, ``source_types`` and
``min_evidence_level`` with their documented meaning, and too-short questions refused with the reason."""

from __future__ import annotations

import pytest

from services.gateway.schemas.common import MIN_QUESTION_CHARS
from shared.models import evidence_level_weight
from tests.unit.gateway.conftest import build_app, client

QUESTION = "Does telephone counseling increase mammography screening?"


@pytest.mark.parametrize("route", ["/v1/ask", "/v1/ask/stream"])
async def test_source_types_and_evidence_level_become_the_search_filters(route: str) -> None:
    app, kafka, _ = build_app()
    async with client(app) as http:
        r = await http.post(
            route,
            json={
                "message": QUESTION,
                "source_types": ["pubmed", "guidelines"],
                "min_evidence_level": 2,
                "language": "EN",
            },
        )
    assert r.status_code == 200, r.text
    filters = kafka.retrievals[-1].filters
    assert filters.sources == ["pubmed", "bookshelf"]  # "guidelines" are the Bookshelf guidelines
    assert filters.min_evidence_level == evidence_level_weight(2) == 0.9  # level 2: RCT or stronger


async def test_each_evidence_level_maps_through_the_single_owner() -> None:
    app, kafka, _ = build_app()
    async with client(app) as http:
        for level in range(1, 6):
            r = await http.post("/v1/ask", json={"question": QUESTION, "min_evidence_level": level})
            assert r.status_code == 200, r.text
            assert kafka.retrievals[-1].filters.min_evidence_level == evidence_level_weight(level)
        r = await http.post("/v1/ask", json={"question": QUESTION})
    assert kafka.retrievals[-1].filters.min_evidence_level is None
    assert kafka.retrievals[-1].filters.sources == []  # no source_types: every source


async def test_agreeing_filters_are_accepted_and_disagreeing_ones_refused_with_the_reason() -> None:
    app, _, _ = build_app()
    async with client(app) as http:
        same = await http.post(
            "/v1/ask",
            json={"question": QUESTION, "source_types": ["guidelines"], "filters": {"sources": ["bookshelf"]}},
        )
        assert same.status_code == 200, same.text
        r = await http.post(
            "/v1/ask", json={"question": QUESTION, "source_types": ["pmc"], "filters": {"sources": ["pubmed"]}}
        )
        assert r.status_code == 422 and "disagree" in r.text and "source_types" in r.text
        r = await http.post(
            "/v1/ask", json={"question": QUESTION, "min_evidence_level": 1, "filters": {"min_evidence_level": 0.5}}
        )
        assert r.status_code == 422 and "disagree" in r.text


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        ({"question": "a"}, "too short"),
        ({"question": "  ab  "}, "too short"),
        ({"question": "123?"}, "no letter"),
        ({"question": QUESTION, "min_evidence_level": 0}, "min_evidence_level"),
        ({"question": QUESTION, "min_evidence_level": 6}, "min_evidence_level"),
        ({"question": QUESTION, "source_types": ["cochrane"]}, "source_types"),
        ({"question": QUESTION, "source_types": []}, "source_types"),
        ({"question": QUESTION, "language": "french"}, "language"),
    ],
)
async def test_bad_query_input_gets_422_with_the_reason(payload: dict[str, object], reason: str) -> None:
    app, kafka, _ = build_app()
    async with client(app) as http:
        for route in ("/v1/ask", "/v1/ask/stream"):
            r = await http.post(route, json=payload)
            assert r.status_code == 422, (route, r.text)
            assert reason in r.text
    assert kafka.retrievals == []  # refused before anything ran


async def test_the_shortest_question_allowed_is_answered() -> None:
    app, kafka, _ = build_app()
    async with client(app) as http:
        r = await http.post("/v1/ask", json={"question": " BMI "})
    assert r.status_code == 200, r.text
    assert len(kafka.retrievals[-1].query) == MIN_QUESTION_CHARS
