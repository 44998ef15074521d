"""A job's state reads ``done`` once it is done (the API's JSON and the CLI's summary)."""

from __future__ import annotations

import pytest

from cli._common import print_summary
from shared.db.jobs import JobStatus


def _status(state: str, **counts: int) -> JobStatus:
    return JobStatus(job_id="j1", kind="pmids", state=state, total=sum(counts.values()), counts=counts)


def test_a_finished_job_reads_done_not_discovered() -> None:
    status = _status("discovered", embedded=3, failed=1, deleted=1)
    assert status.done
    assert status.state == "done"
    body = status.model_dump(mode="json")
    assert body["state"] == "done" and body["done"] is True
    assert JobStatus.model_validate_json(status.model_dump_json()).state == "done"


@pytest.mark.parametrize(
    ("state", "counts"),
    [
        ("discovered", {"embedded": 3, "parsed": 1}),  # one document still in the pipeline
        ("running", {"embedded": 4}),  # discovery still going: more documents may come
    ],
)
def test_a_job_with_work_left_is_not_done(state: str, counts: dict[str, int]) -> None:
    status = _status(state, **counts)
    assert not status.done
    assert status.state == state


def test_failed_discovery_is_done_and_stays_failed() -> None:
    status = _status("failed", embedded=1)
    assert status.done and status.state == "failed"


def test_the_cli_summary_says_done(capsys: pytest.CaptureFixture[str]) -> None:
    print_summary(_status("discovered", embedded=2))
    out = capsys.readouterr().out
    assert "state done" in out and "state discovered" not in out
