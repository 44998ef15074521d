"""The ``evidentia`` CLI as a script would use it, against a running gateway with API keys and a low rate limit.

A second gateway on the session stack (keys on, 30 requests/min with a burst of 3): five ``ingest`` processes
at once all finish (429s waited out, not read as "no such job"), ``ask`` streams and ends with the verified
answer, a wrong key and a stopped gateway give one readable line and their exit statuses.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cli import exits
from services.gateway.security import key_digest
from tests.integration.conftest import Stack
from tests.integration.gateways import extra_gateway

pytestmark = pytest.mark.integration

KEY = "integration-cli-key-42"
ROOT = Path(__file__).resolve().parents[2]


def cli(*argv: str, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "cli.main", *argv],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_cli_against_a_gateway_with_keys_and_a_low_rate_limit(stack: Stack) -> None:
    guard = {
        "EVIDENTIA_GATEWAY_API_KEY_HASHES": f"{key_digest(KEY)}:ingest",  # asks, searches and ingests
        "EVIDENTIA_GATEWAY_RATE_LIMIT_PER_MINUTE": "30",
        "EVIDENTIA_GATEWAY_RATE_LIMIT_BURST": "3",
    }
    pmids = stack.fake.pubmed_ids
    assert len(pmids) >= 5
    groups = [pmids[i::5] for i in range(5)]
    with extra_gateway(stack, "cli-keys", guard) as url:
        env = {**stack.env, "PYTHONPATH": str(ROOT), "EVIDENTIA_GATEWAY_URL": url, "EVIDENTIA_API_KEY": KEY}
        procs = [cli("ingest", "--pmids", ",".join(g), "--refresh", "--json", env=env) for g in groups]
        results = [(p.wait(timeout=400), *p.communicate()) for p in procs]
        for group, (rc, out, err) in zip(groups, results, strict=True):
            assert rc == exits.OK, err
            assert "no ingestion job" not in err
            status = json.loads(out)
            assert status["done"] is True and status["total"] == len(group)
            assert status["counts"].get("embedded", 0) == len(group), status
        assert "rate limited by the gateway (429)" in "".join(err for _, _, err in results)

        ask = cli("ask", "Is telephone counseling effective for mammography screening?", env=env)
        out, err = ask.communicate(timeout=300)
        assert ask.returncode == exits.OK, err
        assert "passages retrieved" in err  # the stream's first event, shown while the answer comes
        assert "Answer (" in out and "citation check:" in out

        wrong = cli("search", "mammography", "--api-key", "wrong", env=env)
        out, err = wrong.communicate(timeout=120)
        assert wrong.returncode == exits.NOPERM and out == ""
        assert err.strip() == "evidentia: error: search: refused (401): the gateway does not accept this API key"
    stopped = cli("ask", "anything?", "--json", env=env)
    out, err = stopped.communicate(timeout=120)
    assert stopped.returncode == exits.UNAVAILABLE and out == ""
    assert json.loads(err)["error"].startswith(f"ask: cannot reach the gateway at {url}")
    assert "Traceback" not in err
    assert os.environ.get("EVIDENTIA_API_KEY") != KEY  # nothing leaked into this process


def test_the_one_shot_setup_is_idempotent_on_a_running_stack(stack: Stack) -> None:
    """``python -m shared.setup`` (compose ``init``, the Kubernetes Jobs, the Helm hook) on a set-up store."""
    env = {**stack.env, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "shared.setup", "--wait", "30"], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert "migrate: database is up to date" in done.stdout
    assert "topics: every topic exists" in done.stdout
    bad = {**env, "EVIDENTIA_DATABASE_URL": "postgresql://nobody:x@127.0.0.1:9/none"}
    failed = subprocess.run(
        [sys.executable, "-m", "shared.setup", "migrate", "--wait", "3"],
        cwd=ROOT,
        env=bad,
        capture_output=True,
        text=True,
    )
    assert failed.returncode == 1 and "migrate: failed:" in failed.stderr
