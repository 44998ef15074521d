"""Opt-in capture of real requests and responses for the docs: with ``EVIDENTIA_CAPTURE=FILE`` set, each call
appends one JSON line ``{"label", "request", "status", "response"}`` to FILE (``docs/workflows.md`` quotes
them, abridged); unset, nothing is written."""

from __future__ import annotations

import json
import os
from typing import Any

import httpx


def capture(request: dict[str, Any], response: httpx.Response, label: str = "") -> None:
    """Append ``request`` and ``response`` (its status and JSON body) to ``$EVIDENTIA_CAPTURE``, if set."""
    path = os.environ.get("EVIDENTIA_CAPTURE")
    if not path:
        return
    record = {"label": label, "request": request, "status": response.status_code, "response": response.json()}
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(record, ensure_ascii=False) + "\n")
