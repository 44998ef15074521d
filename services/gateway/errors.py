"""What a client is told when something fails inside: a reason for its own mistakes, an error id for ours.

A 4xx carries its reason (the request can be fixed). A 5xx never carries internal text (exception
messages, topic names, SQL, broker addresses): the client gets a fixed sentence for the status and an
``error_id``; the full detail is logged once with that id, so an operator finds it from a user's report.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

log = logging.getLogger(__name__)

PUBLIC_MESSAGES = {
    500: "internal error",
    502: "an upstream service failed",
    503: "a backing service is unavailable; try again shortly",
    504: "an upstream service did not answer in time",
}


def new_error_id() -> str:
    return uuid.uuid4().hex[:16]


def public_error(status: int, type_: str, detail: str, *, exc: BaseException | None = None) -> dict[str, Any]:
    """The body (or SSE ``error`` event) a client gets for a failure of ``status``.

    4xx: ``{"detail", "type", "status"}`` with the reason. 5xx: the public sentence, the ``type`` and an
    ``error_id``, while ``detail`` (and ``exc``'s traceback) is logged with the same id.
    """
    if status < 500:
        return {"detail": detail, "message": detail, "type": type_, "status": status}
    error_id = new_error_id()
    log.error(
        "request failed",
        extra={"error_id": error_id, "status": status, "error_type": type_, "error": detail[:2000]},
        exc_info=exc if exc is not None and status == 500 else None,
    )
    message = PUBLIC_MESSAGES.get(status, PUBLIC_MESSAGES[500])
    return {"detail": message, "message": message, "type": type_, "status": status, "error_id": error_id}


def sse_error(status: int, type_: str, detail: str, exc: BaseException | None = None) -> dict[str, Any]:
    """The data of a server-sent ``error`` event: ``type``, ``message``, ``status`` (and ``error_id`` for a 5xx)."""
    body = public_error(status, type_, detail, exc=exc)
    body.pop("detail")
    return body


def error_headers(body: dict[str, Any]) -> dict[str, str] | None:
    """The ``X-Error-Id`` header of an error body that has an error id (a 5xx)."""
    return {"X-Error-Id": body["error_id"]} if "error_id" in body else None
