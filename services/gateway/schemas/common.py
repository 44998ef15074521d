"""What more than one request body checks."""

from __future__ import annotations

from shared.models import QueryForm, check_query_length
from shared.settings import get_settings

#: The shortest question answered: at least this many characters (surrounding blanks not counted), one of them a
#: letter (the medical assistant's ``QueryInput`` rule: "Query too short" below 3). Shorter: 422 with the reason.
MIN_QUESTION_CHARS = 3


def check_question_length(text: str, what: str) -> None:
    """Refuse a question too short to search: under :data:`MIN_QUESTION_CHARS` characters or without a letter."""
    stripped = text.strip()
    if len(stripped) < MIN_QUESTION_CHARS:
        raise ValueError(
            f"{what} is too short ({len(stripped)} characters): ask at least {MIN_QUESTION_CHARS} characters, "
            "e.g. a drug or condition name"
        )
    if not any(c.isalpha() for c in stripped):
        raise ValueError(f"{what} has no letter: ask in words, e.g. a drug or condition name")


def check_query_terms(text: str, what: str) -> None:
    """Refuse a query longer than the longest useful one (``EVIDENTIA_RETRIEVAL_MAX_QUERY_TERMS``)."""
    check_query_length(text, what, get_settings().retrieval.max_query_terms)


def check_query_form(form: QueryForm, what: str) -> None:
    """Refuse a query form whose rendered text is longer than a query may be (as :func:`check_query_terms`)."""
    form.check_length(get_settings().retrieval.max_query_terms, what)
