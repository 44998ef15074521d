"""/v1/evidence and /v1/query list their sources strongest evidence first, as /v1/ask does (issue #19 item 2)."""

from __future__ import annotations

from typing import Any

from tests.unit.workflows.conftest import build, client, pubmed_hit

# Retrieval order: an editorial first, then a meta-analysis, then a trial with no stored evidence weight.
GRADED = [
    pubmed_hit(
        "101", "An editorial on metformin", "Metformin in polycystic ovary syndrome: a view.", 1, "editorial"
    ).model_copy(update={"evidence_level": 0.3}),
    pubmed_hit(
        "202", "Metformin in PCOS: a meta-analysis", "Metformin improved ovulation in PCOS.", 2, "meta-analysis"
    ).model_copy(update={"evidence_level": 1.0}),
    pubmed_hit("303", "A metformin trial", "Metformin reduced ovarian hyperstimulation in PCOS.", 3),
]


def _order(body: dict[str, Any]) -> list[tuple[str, int]]:
    return [(s["pmid"], s["rank"]) for s in body["sources"]]


async def test_evidence_lists_sources_strongest_first_keeping_their_ranks() -> None:
    app, _, backend = build()
    backend.pubmed_hits, backend.guideline_hits = list(GRADED), []
    async with client(app) as http:
        r = await http.post("/v1/evidence", json={"drug": "metformin", "disease": "polycystic ovary syndrome"})
    assert r.status_code == 200, r.text
    # meta-analysis (1.0), then the unweighted trial (neutral 0.5), then the editorial (0.3)
    assert _order(r.json()) == [("202", 2), ("303", 3), ("101", 1)]


async def test_query_lists_sources_strongest_first_and_unweighted_sources_keep_retrieval_order() -> None:
    app, _, backend = build()
    backend.pubmed_hits, backend.guideline_hits = list(GRADED), []
    async with client(app) as http:
        body = (await http.post("/v1/query", json={"question": "Does metformin help women with PCOS ovulate?"})).json()
    assert _order(body) == [("202", 2), ("303", 3), ("101", 1)]

    backend.pubmed_hits = [h.model_copy(update={"evidence_level": None}) for h in GRADED]
    async with client(app) as http:
        body = (await http.post("/v1/query", json={"question": "Does metformin help women with PCOS ovulate?"})).json()
    assert _order(body) == [("101", 1), ("202", 2), ("303", 3)]
