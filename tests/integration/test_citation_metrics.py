"""Issue 19 item 6 through the running services: ``evidentia import icite`` loads the (hand-made) snapshot
fixture into the stack's PostgreSQL; ``/v1/search`` hits and ``/v1/ask`` sources and citations carry each
paper's ``citation_metrics``; ``min_citation_count`` and ``min_nih_percentile`` filter, a paper without metrics
failing them (extractive mode, then Claude mode against the fake Messages API; real Kafka and PostgreSQL)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.anthropic_server import FakeAnthropic
from tests.integration.conftest import Stack, claude_mode

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "icite" / "icite_metadata.csv"
QUERY = "intermittent fasting migraine frequency"
# In the fixture: 39000001 cited 250 times (95.3rd percentile), 39000002 12 times (41.7th); 39000008 has no row.
PAPERS = {
    "39000001": "Intermittent fasting reduced migraine frequency by four days a month in a randomised trial.",
    "39000002": "Intermittent fasting was associated with fewer migraine days in a cohort of adults.",
    "39000008": "Intermittent fasting did not change migraine frequency in a small crossover study.",
}


def _inline(pmid: str, text: str) -> dict[str, Any]:
    return {
        "source": "pubmed",
        "source_id": pmid,
        "pmid": pmid,
        "title": f"Intermittent fasting and migraine frequency ({pmid})",
        "abstract": text,
        "year": 2020,
    }


def _search(http: Any, **filters: Any) -> list[dict[str, Any]]:
    r = http.post("/v1/search", json={"query": QUERY, "mode": "hybrid", "top_n": 20, "filters": filters})
    assert r.status_code == 200, r.text
    hits: list[dict[str, Any]] = r.json()["hits"]
    return [h for h in hits if h["pmid"] in PAPERS]


def _import(stack: Stack) -> subprocess.CompletedProcess[str]:
    """``evidentia import icite FIXTURE`` against the stack's PostgreSQL (as an operator runs it)."""
    done = subprocess.run(
        [sys.executable, "-m", "cli.main", "import", "icite", str(FIXTURE)],
        cwd=ROOT,
        env={**stack.env, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done


def _show(label: str, body: Any) -> None:
    """The response as the docs quote it (``pytest -rP`` prints it)."""
    print(f"--- {label}\n{json.dumps(body, indent=1)[:4000]}")


def test_import_then_search_and_ask_with_citation_metrics(stack: Stack) -> None:
    with stack.http() as http:
        r = http.post("/v1/ingest", json={"documents": [_inline(p, t) for p, t in PAPERS.items()]})
        assert r.status_code == 202, r.text
        assert stack.wait_job(r.json()["job_id"])["done"]
        before = _search(http)
        assert {h["pmid"] for h in before} == set(PAPERS)
        assert all(h["citation_metrics"] is None for h in before)  # nothing imported yet
        assert _search(http, min_citation_count=0) == []  # no metrics: the filter fails

        done = _import(stack)
        assert done.stdout.strip() == "loaded 4 rows (4 new, 0 updated), skipped 4 malformed"
        _show("evidentia import icite", {"stdout": done.stdout, "stderr": done.stderr})

        hits = _search(http)
        metrics = {h["pmid"]: h["citation_metrics"] for h in hits}
        assert metrics["39000001"] == {
            "citation_count": 250,
            "relative_citation_ratio": 4.12,
            "nih_percentile": 95.3,
            "year": 2019,
            "provisional": False,
        }
        assert metrics["39000002"]["citation_count"] == 12 and metrics["39000008"] is None

        body = {"query": QUERY, "mode": "hybrid", "top_n": 20, "filters": {"min_citation_count": 100}}
        r = http.post("/v1/search", json=body)
        assert [h["pmid"] for h in r.json()["hits"]] == ["39000001"]  # the sample's papers have no metrics
        _show("search min_citation_count 100", r.json())
        assert {h["pmid"] for h in _search(http, min_nih_percentile=40)} == {"39000001", "39000002"}
        assert {h["pmid"] for h in _search(http, min_nih_percentile=90, min_citation_count=10)} == {"39000001"}
        r = http.post("/v1/search", json={"query": QUERY, "filters": {"min_nih_percentile": 101}})
        assert r.status_code == 422 and "min_nih_percentile" in r.text

        ask = http.post(
            "/v1/ask",
            json={
                "question": "Does intermittent fasting reduce migraine frequency?",
                "filters": {"min_nih_percentile": 40},
            },
        )
        assert ask.status_code == 200, ask.text
        answer = ask.json()
        assert {s["pmid"] for s in answer["sources"]} == {"39000001", "39000002"}
        assert all(s["citation_metrics"]["nih_percentile"] >= 40 for s in answer["sources"])
        cited = {c["citation_id"]: c["citation_metrics"] for c in answer["citations"]}
        assert cited and all(cited[c] is not None for c in cited)
        assert cited.get("PMID:39000001", {"citation_count": 250})["citation_count"] == 250
        _show("ask min_nih_percentile 40", answer)

        # The conversation keeps each citation's metrics as the answer showed them.
        stored = http.get(f"/v1/conversations/{answer['conversation_id']}")
        assert stored.status_code == 200, stored.text
        assert {c["citation_id"]: c["citation_metrics"] for c in stored.json()["references"]} == cited


def test_llm_answers_cite_with_metrics_under_a_citation_filter(stack: Stack) -> None:
    with stack.http() as http:  # the same papers and import as above (both idempotent), so this test stands alone
        r = http.post("/v1/ingest", json={"documents": [_inline(p, t) for p, t in PAPERS.items()]})
        assert r.status_code == 202, r.text
        assert stack.wait_job(r.json()["job_id"])["done"]
    _import(stack)
    with FakeAnthropic() as fake, claude_mode(stack, fake), stack.http() as http:
        r = http.post(
            "/v1/ask",
            json={
                "question": "Does intermittent fasting reduce migraine frequency?",
                "filters": {"min_citation_count": 10},
            },
        )
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["mode"] == "llm"
        assert {s["pmid"] for s in body["sources"]} == {"39000001", "39000002"}  # 39000008: no metrics
        assert body["citations"]
        for c in body["citations"]:
            assert c["citation_metrics"]["citation_count"] >= 10, c
        shown = {i for rq in fake.requests for i in rq.source_ids}  # what Claude was given to cite
        assert shown == {"PMID:39000001", "PMID:39000002"}
