"""Document priority at the gateway: ``PATCH /v1/documents/{id}`` (admin scope, 404, bounds) and the
``priority`` of ``POST /v1/ingest`` (per job, recorded in the job's params; per inline document, carried in its
event). The SQL runs on PostgreSQL in tests/integration/test_document_priority_store.py."""

from __future__ import annotations

import json
from typing import Any

import pytest

from services.gateway import deps
from services.gateway.security import key_digest
from shared.events import DocumentFetched
from shared.settings import GatewaySettings
from tests.unit.gateway.conftest import build_app, client
from tests.unit.gateway.test_ingest_route import RecordingKafka, RecordingPool

READER, ADMIN = "reader-key-1234567890", "admin-key-5555555555"


class PriorityPool(RecordingPool):
    """Stores priorities of the documents it knows."""

    def __init__(self, known: dict[str, int]):
        super().__init__()
        self.known = known

    async def fetchval(self, sql: str, *args: Any) -> int | None:
        assert sql.startswith("UPDATE documents SET priority = $2"), sql
        doc, priority = args
        if doc not in self.known:
            return None
        self.known[doc] = priority
        return 1


def app_with(pool: RecordingPool, gateway: GatewaySettings | None = None) -> tuple[Any, RecordingKafka]:
    app, _, _ = build_app(gateway=gateway)
    kafka = RecordingKafka()
    app.dependency_overrides[deps.get_pool] = lambda: pool
    app.dependency_overrides[deps.get_kafka] = lambda: kafka
    return app, kafka


async def test_patch_sets_the_priority_of_a_stored_document() -> None:
    pool = PriorityPool({"pubmed:1": 50})
    app, _ = app_with(pool)
    async with client(app) as http:
        r = await http.patch("/v1/documents/pubmed:1", json={"priority": 0})
        assert r.status_code == 200, r.text
        assert r.json() == {"document_id": "pubmed:1", "priority": 0}
        assert pool.known["pubmed:1"] == 0
        missing = await http.patch("/v1/documents/pubmed:2", json={"priority": 100})
        assert missing.status_code == 404 and "pubmed:2" in missing.json()["detail"]
        for bad in ({"priority": 101}, {"priority": -1}, {}, {"priority": 10, "title": "x"}):
            assert (await http.patch("/v1/documents/pubmed:1", json=bad)).status_code == 422, bad
    assert pool.known == {"pubmed:1": 0}


async def test_patch_needs_the_admin_scope() -> None:
    pool = PriorityPool({"pubmed:1": 50})
    keys = GatewaySettings(api_key_hashes=f"{key_digest(READER)}, {key_digest(ADMIN)}:admin")  # type: ignore[call-arg]
    app, _ = app_with(pool, keys)
    async with client(app, READER) as reader, client(app, ADMIN) as admin:
        r = await reader.patch("/v1/documents/pubmed:1", json={"priority": 100})
        assert r.status_code == 403 and "`admin` scope" in r.json()["detail"]
        assert pool.known["pubmed:1"] == 50
        assert (await admin.patch("/v1/documents/pubmed:1", json={"priority": 100})).status_code == 200
    assert pool.known["pubmed:1"] == 100


async def test_ingest_records_the_job_priority_and_carries_each_documents_own() -> None:
    pool = RecordingPool()
    app, kafka = app_with(pool)
    docs = [
        {"source": "pubmed", "source_id": "7", "title": "Own, high", "priority": 100},
        {"source": "pubmed", "source_id": "8", "title": "Own, the job's"},
    ]
    async with client(app) as http:
        r = await http.post("/v1/ingest", json={"pmids": ["10808977"], "documents": docs, "priority": 10})
        assert r.status_code == 202, r.text
        assert (await http.post("/v1/ingest", json={"pmids": ["1"], "priority": 101})).status_code == 422
        bad_doc = {"documents": [{"source": "pubmed", "source_id": "9", "title": "t", "priority": -5}]}
        assert (await http.post("/v1/ingest", json=bad_doc)).status_code == 422
    job = pool.statements[0]
    assert job[0] == "INSERT ingest_jobs"
    assert json.loads(job[1][2])["priority"] == 10  # the job's params: what the store reads for its documents
    fetched = [e for e, _, _ in kafka.published if isinstance(e, DocumentFetched)]
    assert [e.document.priority for e in fetched if e.document] == [100, None]


def test_the_cli_sends_the_job_priority() -> None:
    from cli.ingest import _request_body
    from cli.main import build_parser
    from shared.settings import Settings

    parser = build_parser()
    args = parser.parse_args(["ingest", "--pmids", "1,2", "--priority", "100"])
    body = _request_body(args, Settings())  # type: ignore[call-arg]
    assert body["priority"] == 100 and body["pmids"] == ["1", "2"]
    assert "priority" not in _request_body(parser.parse_args(["ingest", "--pmids", "1"]), Settings())  # type: ignore[call-arg]
    with pytest.raises(SystemExit) as exc:
        parser.parse_args(["ingest", "--pmids", "1", "--priority", "101"])
    assert exc.value.code == 2


async def test_only_an_admin_keys_job_may_reach_stored_documents_priority() -> None:
    """The job's params say whether its priority reaches documents already stored (migration 230 reads it)."""
    ingester = "ingester-key-0987654321"
    keys = GatewaySettings(  # type: ignore[call-arg]
        api_key_hashes=f"{key_digest(ingester)}:ingest, {key_digest(ADMIN)}:admin"
    )
    pool = RecordingPool()
    app, _ = app_with(pool, keys)
    async with client(app, ingester) as http, client(app, ADMIN) as admin:
        assert (await http.post("/v1/ingest", json={"pmids": ["1"], "priority": 0})).status_code == 202
        assert (await admin.post("/v1/ingest", json={"pmids": ["1"], "priority": 0})).status_code == 202
    jobs = [json.loads(args[2]) for name, args in pool.statements if name == "INSERT ingest_jobs"]
    assert [j.get("priority_stored") for j in jobs] == [None, True]
    assert [j["priority"] for j in jobs] == [0, 0]
