"""The gateway's HTTP request and response bodies, one module per concern (they make the OpenAPI schema)."""

from services.gateway.schemas.admin import ReplayRequest, ReplayResult
from services.gateway.schemas.ask import AskRequest, AskResponse
from services.gateway.schemas.common import check_query_terms
from services.gateway.schemas.conversations import ConversationView, MessageView
from services.gateway.schemas.ingest import IngestAccepted, IngestRequest
from services.gateway.schemas.search import SearchRequest, SearchResponse

__all__ = [
    "AskRequest",
    "AskResponse",
    "ConversationView",
    "IngestAccepted",
    "IngestRequest",
    "MessageView",
    "ReplayRequest",
    "ReplayResult",
    "SearchRequest",
    "SearchResponse",
    "check_query_terms",
]
