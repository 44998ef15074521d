"""What more than one request body checks."""

from __future__ import annotations

from shared.models import query_terms
from shared.settings import get_settings


def check_query_terms(text: str, what: str) -> None:
    """Refuse a query longer than the longest useful one (``EVIDENTIA_RETRIEVAL_MAX_QUERY_TERMS``)."""
    cap = get_settings().retrieval.max_query_terms
    n = len(query_terms(text))
    if n > cap:
        raise ValueError(
            f"{what} has {n} terms; at most {cap} are searched (EVIDENTIA_RETRIEVAL_MAX_QUERY_TERMS): "
            "shorten it to the question or the key terms"
        )
