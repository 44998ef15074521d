"""``evidentia ingest --source``: the body the CLI sends the gateway for a query, ids or a condition at a source,
and the bodies the gateway's schema accepts from it."""

from __future__ import annotations

import pytest

from cli import exits
from cli.ingest import _request_body, run
from cli.main import build_parser
from services.gateway.schemas.ingest import IngestRequest
from shared.settings import Settings


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (
            ["--source", "clinicaltrials", "--query", "metformin", "--intervention", "placebo"],
            {"source": "clinicaltrials", "query": "metformin", "intervention": "placebo", "max_results": 500},
        ),
        (
            ["--source", "clinicaltrials", "--condition", "asthma", "--max", "20"],
            {"source": "clinicaltrials", "condition": "asthma", "max_results": 20},
        ),
        (
            ["--source", "clinicaltrials", "--ids", "NCT04000001, nct05000002"],
            {"source": "clinicaltrials", "ids": ["NCT04000001", "nct05000002"]},
        ),
        (["--query", "aspirin"], {"query": "aspirin", "max_results": 500}),
        (
            ["--source", "fda_label", "--query", "warfarin", "--max", "5"],
            {"source": "fda_label", "query": "warfarin", "max_results": 5},
        ),
    ],
)
def test_a_source_s_query_ids_and_condition_reach_the_gateway_body(
    argv: list[str], expected: dict[str, object]
) -> None:
    args = build_parser().parse_args(["ingest", *argv])
    body = _request_body(args, Settings())
    assert body == {"refresh": False, **expected}
    IngestRequest.model_validate(body)  # what the CLI sends, the gateway takes


def test_a_condition_at_pubmed_is_a_usage_error() -> None:
    args = build_parser().parse_args(["ingest", "--condition", "asthma"])
    assert run(args) == exits.USAGE
