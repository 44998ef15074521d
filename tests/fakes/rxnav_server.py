"""A local fake of an RxNav-style drug interaction API on 127.0.0.1 (a random port).

    with FakeRxNav() as fake:
        fake.add_drug("warfarin", "11289")
        fake.add_interaction("11289", "1191", "high", "Aspirin may increase the anticoagulant effect of warfarin.")
        settings = WorkflowSettings(rxnav_url=fake.url)

Serves ``GET /REST/rxcui.json?name=`` and ``GET /REST/interaction/list.json?rxcuis=a+b`` in the shape the
NLM RxNav REST API used; records every request. The interaction texts are made up for tests.
"""

from __future__ import annotations

import urllib.parse
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.fakes.http import LocalHttpServer, QuietHandler, send_json


class FakeRxNav(LocalHttpServer):
    thread_name = "fake-rxnav"

    def __init__(self) -> None:
        super().__init__()
        self.drugs: dict[str, str] = {}
        self.interactions: list[tuple[str, str, str, str]] = []
        self.requests: list[tuple[str, dict[str, list[str]]]] = []
        self.fail_status: int | None = None

    def add_drug(self, name: str, rxcui: str) -> None:
        self.drugs[name.lower()] = rxcui

    def add_interaction(self, a: str, b: str, severity: str, description: str) -> None:
        self.interactions.append((a, b, severity, description))

    def _answer(self, path: str, params: dict[str, list[str]]) -> tuple[int, dict[str, Any]]:
        if self.fail_status is not None:
            return self.fail_status, {"error": "injected failure"}
        if path == "/REST/rxcui.json":
            name = (params.get("name") or [""])[0].lower()
            rxcui = self.drugs.get(name)
            return 200, {"idGroup": {"name": name, **({"rxnormId": [rxcui]} if rxcui else {})}}
        if path == "/REST/interaction/list.json":
            ids = set((params.get("rxcuis") or [""])[0].replace("+", " ").split())
            names = {v: k for k, v in self.drugs.items()}
            types = [
                {
                    "minConcept": [{"rxcui": a, "name": names.get(a, a)}, {"rxcui": b, "name": names.get(b, b)}],
                    "interactionPair": [{"severity": sev, "description": desc}],
                }
                for a, b, sev, desc in self.interactions
                if a in ids and b in ids
            ]
            body: dict[str, Any] = {"nlmDisclaimer": "test data"}
            if types:
                body["fullInteractionTypeGroup"] = [{"sourceName": "FakeSource", "fullInteractionType": types}]
            return 200, body
        return 404, {"error": f"no route {path}"}

    def handler_class(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(QuietHandler):
            def do_GET(self) -> None:
                parsed = urllib.parse.urlsplit(self.path)
                params = urllib.parse.parse_qs(parsed.query)
                fake.requests.append((parsed.path, params))
                status, body = fake._answer(parsed.path, params)
                send_json(self, status, body)

        return Handler
