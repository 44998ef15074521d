"""The gateway's HTTP request and response bodies, one module per concern (they make the OpenAPI schema)."""

from services.gateway.schemas.ask import (
    AskRequest,
    AskResponse,
    IngestAccepted,
    IngestRequest,
    SearchRequest,
    SearchResponse,
    check_query_terms,
)

__all__ = [
    "AskRequest",
    "AskResponse",
    "IngestAccepted",
    "IngestRequest",
    "SearchRequest",
    "SearchResponse",
    "check_query_terms",
]
