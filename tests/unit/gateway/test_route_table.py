"""The gateway's HTTP surface, pinned: every path, method, operation id, status code and response model.

A restructuring of the routers (modules, dependencies, schemas) must leave this table as it is; a change
to the API itself changes it on purpose, in the same commit.
"""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

from services.gateway.app import create_app
from shared.settings import Settings

# (method, path) -> (operation id, response codes, tags, response schema of the success status)
ROUTES: dict[tuple[str, str], tuple[str, list[str], list[str], str | None]] = {
    ("GET", "/healthz"): ("healthz_healthz_get", ["200"], ["operations"], None),
    ("GET", "/metrics"): ("prometheus_metrics_get", ["200"], ["operations"], None),
    ("GET", "/readyz"): ("readyz_readyz_get", ["200"], ["operations"], None),
    ("GET", "/v1/admin/dlq/{topic}"): ("list_letters_v1_admin_dlq__topic__get", ["200", "422"], ["admin"], None),
    ("POST", "/v1/admin/dlq/{topic}/replay"): (
        "replay_letters_v1_admin_dlq__topic__replay_post",
        ["200", "422"],
        ["admin"],
        None,
    ),
    ("GET", "/v1/admin/dlq/{topic}/{ref}"): (
        "show_letter_v1_admin_dlq__topic___ref__get",
        ["200", "422"],
        ["admin"],
        None,
    ),
    ("DELETE", "/v1/admin/documents/{document_id}"): (
        "delete_document_v1_admin_documents__document_id__delete",
        ["202", "403", "404", "422"],
        ["administration"],
        None,
    ),
    ("POST", "/v1/ask"): ("ask_v1_ask_post", ["200", "403", "404", "409", "422"], ["answers"], "AskResponse"),
    ("POST", "/v1/ask/stream"): ("ask_stream_v1_ask_stream_post", ["200", "403", "422"], ["answers"], None),
    ("GET", "/v1/conversations/{conversation_id}"): (
        "conversation_v1_conversations__conversation_id__get",
        ["200", "422"],
        ["answers"],
        "ConversationView",
    ),
    ("DELETE", "/v1/conversations/{conversation_id}"): (
        "delete_conversation_v1_conversations__conversation_id__delete",
        ["204", "404", "422"],
        ["answers"],
        None,
    ),
    ("PATCH", "/v1/documents/{document_id}"): (
        "patch_document_v1_documents__document_id__patch",
        ["200", "403", "404", "422"],
        ["administration"],
        "DocumentPriority",
    ),
    ("POST", "/v1/evidence"): (
        "evidence_v1_evidence_post",
        ["200", "403", "422"],
        ["workflows"],
        "EvidenceResponse",
    ),
    ("POST", "/v1/evidence/stream"): (
        "evidence_stream_v1_evidence_stream_post",
        ["200", "403", "422"],
        ["workflows"],
        None,
    ),
    ("POST", "/v1/guidelines/recommend"): (
        "recommend_v1_guidelines_recommend_post",
        ["200", "422"],
        ["workflows"],
        "GuidelineResponse",
    ),
    ("POST", "/v1/guidelines/consult"): (
        "consult_v1_guidelines_consult_post",
        ["200", "404", "409", "422"],
        ["workflows"],
        "ConsultResponse",
    ),
    ("DELETE", "/v1/guidelines/consult/{consultation_id}"): (
        "delete_consultation_v1_guidelines_consult__consultation_id__delete",
        ["204", "404", "422"],
        ["workflows"],
        None,
    ),
    ("POST", "/v1/ingest"): ("ingest_v1_ingest_post", ["202", "403", "409", "422"], ["ingestion"], "IngestAccepted"),
    ("GET", "/v1/ingest/{job_id}"): (
        "ingest_status_v1_ingest__job_id__get",
        ["200", "422"],
        ["ingestion"],
        "JobStatus",
    ),
    ("POST", "/v1/query"): ("query_v1_query_post", ["200", "403", "422"], ["workflows"], "QueryResponse"),
    ("POST", "/v1/search"): ("search_v1_search_post", ["200", "422"], ["search"], "SearchResponse"),
}


def _schema_name(op: dict[str, Any]) -> str | None:
    ok = next(code for code in op["responses"] if code.startswith("2"))
    schema = op["responses"][ok].get("content", {}).get("application/json", {}).get("schema", {})
    ref = schema.get("$ref")
    return ref.rsplit("/", 1)[-1] if isinstance(ref, str) else None


def test_the_openapi_route_table_is_pinned() -> None:
    spec = create_app(Settings()).openapi()  # type: ignore[call-arg]
    table = {
        (method.upper(), path): (op["operationId"], sorted(op["responses"]), op.get("tags", []), _schema_name(op))
        for path, ops in spec["paths"].items()
        for method, op in ops.items()
    }
    assert table == ROUTES


def test_the_web_page_is_served_but_not_in_the_schema() -> None:
    app = create_app(Settings())  # type: ignore[call-arg]
    page = TestClient(app).get("/")  # no lifespan: the page needs neither Kafka nor PostgreSQL
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "frame-ancestors 'none'" in page.headers["content-security-policy"]
    assert "/" not in app.openapi()["paths"]
