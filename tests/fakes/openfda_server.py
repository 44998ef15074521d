"""A local fake of openFDA's drug label endpoint (``GET /drug/label.json``) on 127.0.0.1 (a random port).

    with FakeOpenFda() as fake:              # serves tests/fixtures/openfda/labels.json
        fake.replace(load("warfarin-v13.json"))   # a new version of a set
        settings = OpenFdaSettings(url=fake.url)

Shaped like the real API (see ``tests/fixtures/openfda/README.md``): ``search`` in openFDA's syntax
(``field:value`` or ``field:"a phrase"``, nested fields with dots as in ``openfda.rxcui``, terms joined by
``AND`` / ``+AND+``, or by a space / ``OR`` for either), ``limit`` (default 1, at most 1000) and ``skip`` (at
most 25000) paging, the ``meta.results`` block, and its error bodies: 404 ``NOT_FOUND`` when nothing matches,
400 ``BAD_REQUEST`` for a limit or skip out of range, 429 ``OVER_RATE_LIMIT`` (with ``Retry-After``) for the
next ``rate_limited`` requests. A field value matches when the phrase occurs in it as whole words, any case
(openFDA's analysed fields); every request is recorded.
"""

from __future__ import annotations

import copy
import json
import re
import urllib.parse
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

from tests.fakes.http import LocalHttpServer, QuietHandler, send_json

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "openfda"
MAX_LIMIT, MAX_SKIP = 1000, 25000
_TERM = re.compile(r'([\w.]+):("[^"]*"|[^\s"()]+)')


def load(name: str) -> list[dict[str, Any]]:
    """The labels of fixture ``name`` (a response body's ``results``)."""
    results: list[dict[str, Any]] = json.loads((FIXTURES / name).read_text())["results"]
    return results


def error(name: str) -> dict[str, Any]:
    """The error body of fixture ``error-<name>.json``."""
    body: dict[str, Any] = json.loads((FIXTURES / f"error-{name}.json").read_text())
    return body


def _values(label: dict[str, Any], field: str) -> list[str]:
    node: Any = label
    for part in field.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    items = node if isinstance(node, list) else [node]
    return [str(v) for v in items if v is not None and not isinstance(v, (dict, list))]


def _matches(label: dict[str, Any], field: str, value: str) -> bool:
    phrase = value.strip('"').lower()
    pattern = re.compile(rf"(?<!\w){re.escape(phrase)}(?!\w)")
    return any(pattern.search(v.lower()) for v in _values(label, field))


def matches(label: dict[str, Any], search: str) -> bool:
    """Whether ``label`` matches an openFDA ``search`` expression (AND binds tighter than OR)."""
    if not search.strip():
        return True
    for alternative in re.split(r"\s+OR\s+", search.replace("+AND+", " AND ").replace("+", " ")):
        conjuncts = re.split(r"\s+AND\s+", alternative)
        if all(any(_matches(label, f, v) for f, v in _TERM.findall(c)) for c in conjuncts if c.strip()):
            return True
    return False


class FakeOpenFda(LocalHttpServer):
    thread_name = "fake-openfda"

    def __init__(self, labels: list[dict[str, Any]] | None = None) -> None:
        super().__init__()
        self.labels: list[dict[str, Any]] = copy.deepcopy(load("labels.json") if labels is None else labels)
        self.requests: list[dict[str, list[str]]] = []
        self.rate_limited = 0
        self.retry_after_s = 1
        self.fail_status: int | None = None

    def replace(self, labels: list[dict[str, Any]]) -> None:
        """Serve ``labels`` instead of the labels of the same sets (a new version of each)."""
        sets = {label["set_id"] for label in labels}
        self.labels = [x for x in self.labels if x.get("set_id") not in sets] + copy.deepcopy(labels)

    def _answer(self, path: str, params: dict[str, list[str]]) -> tuple[int, dict[str, Any], dict[str, str]]:
        if self.rate_limited > 0:
            self.rate_limited -= 1
            return 429, error("rate-limit"), {"Retry-After": str(self.retry_after_s)}
        if self.fail_status is not None:
            return self.fail_status, {"error": {"code": "SERVER_ERROR", "message": "injected failure"}}, {}
        if path != "/drug/label.json":
            return 404, {"error": {"code": "NOT_FOUND", "message": "Not found"}}, {}
        try:
            limit = int((params.get("limit") or ["1"])[0])
            skip = int((params.get("skip") or ["0"])[0])
        except ValueError:
            return 400, {"error": {"code": "BAD_REQUEST", "message": "Invalid limit or skip"}}, {}
        if limit > MAX_LIMIT:
            return 400, error("limit"), {}
        if skip > MAX_SKIP:
            return 400, error("skip"), {}
        search = (params.get("search") or [""])[0]
        found = [label for label in self.labels if matches(label, search)]
        page = found[skip : skip + limit]
        if not page:
            return 404, error("not-found"), {}
        meta = {
            "disclaimer": "Do not rely on openFDA to make decisions regarding medical care.",
            "terms": "https://open.fda.gov/terms/",
            "license": "https://open.fda.gov/license/",
            "last_updated": "2026-11-20",
            "results": {"skip": skip, "limit": limit, "total": len(found)},
        }
        return 200, {"meta": meta, "results": page}, {}

    def handler_class(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(QuietHandler):
            def do_GET(self) -> None:
                parsed = urllib.parse.urlsplit(self.path)
                params = urllib.parse.parse_qs(parsed.query)
                fake.requests.append(params)
                status, body, headers = fake._answer(parsed.path, params)
                send_json(self, status, body, headers)

        return Handler
