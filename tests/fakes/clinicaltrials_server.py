"""A local fake of the ClinicalTrials.gov API v2 ``studies`` endpoint on 127.0.0.1 (a random port).

    with FakeClinicalTrials() as fake:
        fake.add_fixture("NCT04000001")          # tests/fixtures/clinicaltrials/NCT04000001.json
        settings = ClinicalTrialsSettings(base_url=fake.base_url)

Serves ``GET /api/v2/studies`` as the registry does (see tests/fixtures/clinicaltrials/README.md): a search by
``query.term`` / ``query.cond`` / ``query.intr`` (a study matches when every given query's words occur in its
text, case ignored) or by ``filter.ids`` (comma-separated NCT numbers), ``fields`` (only the NCT number is
honoured, the one projection the client asks for), ``pageSize`` (1..1000, else 400) and ``pageToken`` (the
``nextPageToken`` of the page before; an unknown one is a 400 with the registry's message). ``GET
/api/v2/studies/{nct}`` answers one study or 404. ``throttle(n, retry_after)`` answers the next ``n``
requests with 429 and a ``Retry-After``; ``fail(n, status)`` the next ``n`` with that status. Every request is
recorded.
"""

from __future__ import annotations

import json
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

from tests.fakes.http import LocalHttpServer, QuietHandler, send_json

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "clinicaltrials"
ID_FIELD = "protocolSection.identificationModule.nctId"


def load_fixture(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / f"{name}.json").read_text())
    return data


class FakeClinicalTrials(LocalHttpServer):
    thread_name = "fake-clinicaltrials"

    def __init__(self) -> None:
        super().__init__()
        self.studies: dict[str, dict[str, Any]] = {}
        self.requests: list[tuple[str, dict[str, list[str]]]] = []
        self._pages: dict[str, int] = {}
        self._lock = threading.Lock()
        self._throttle: tuple[int, str] = (0, "0")
        self._fail: tuple[int, int] = (0, 500)

    @property
    def base_url(self) -> str:
        return f"{self.url}/api/v2/"

    def add_study(self, study: dict[str, Any]) -> str:
        nct = str(study["protocolSection"]["identificationModule"]["nctId"])
        self.studies[nct] = study
        return nct

    def add_fixture(self, name: str) -> str:
        return self.add_study(load_fixture(name))

    def throttle(self, times: int, retry_after: str = "1") -> None:
        self._throttle = (times, retry_after)

    def fail(self, times: int, status: int = 503) -> None:
        self._fail = (times, status)

    def _matches(self, study: dict[str, Any], params: dict[str, list[str]]) -> bool:
        text = json.dumps(study.get("protocolSection", {})).lower()
        for key in ("query.term", "query.cond", "query.intr"):
            for value in params.get(key, []):
                if not all(word in text for word in value.lower().split()):
                    return False
        return True

    def _search(self, params: dict[str, list[str]]) -> tuple[int, dict[str, Any]]:
        try:
            size = int((params.get("pageSize") or ["10"])[0])
        except ValueError:
            size = -1
        if not 1 <= size <= 1000:
            return 400, {"message": "pageSize must be an integer between 1 and 1000"}
        if ids := params.get("filter.ids"):
            wanted = [i.strip().upper() for i in ",".join(ids).split(",") if i.strip()]
            found = [self.studies[n] for n in wanted if n in self.studies]
        else:
            found = [s for n, s in sorted(self.studies.items()) if self._matches(s, params)]
        start = 0
        if token := (params.get("pageToken") or [""])[0]:
            with self._lock:
                if token not in self._pages:
                    return 400, load_fixture("error_400")
                start = self._pages[token]
        page = found[start : start + size]
        if (params.get("fields") or [""])[0] == ID_FIELD:
            page = [
                {
                    "protocolSection": {
                        "identificationModule": {"nctId": s["protocolSection"]["identificationModule"]["nctId"]}
                    }
                }
                for s in page
            ]
        body: dict[str, Any] = {"studies": page}
        if start + size < len(found):
            next_token = f"tok{len(self._pages) + 1}"
            with self._lock:
                self._pages[next_token] = start + size
            body["nextPageToken"] = next_token
        return 200, body

    def _answer(self, path: str, params: dict[str, list[str]]) -> tuple[int, dict[str, Any], dict[str, str]]:
        with self._lock:
            times, retry_after = self._throttle
            if times > 0:
                self._throttle = (times - 1, retry_after)
                return 429, {"message": "Too Many Requests"}, {"Retry-After": retry_after}
            times, status = self._fail
            if times > 0:
                self._fail = (times - 1, status)
                return status, {"message": "Service Unavailable"}, {}
        if path == "/api/v2/studies":
            return (*self._search(params), {})
        if path.startswith("/api/v2/studies/"):
            nct = path.rsplit("/", 1)[-1].upper()
            if nct in self.studies:
                return 200, self.studies[nct], {}
            return 404, {"message": f"Study not found: {nct}"}, {}
        return 404, {"message": f"no route {path}"}, {}

    def handler_class(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(QuietHandler):
            def do_GET(self) -> None:
                parsed = urllib.parse.urlsplit(self.path)
                params = urllib.parse.parse_qs(parsed.query)
                fake.requests.append((parsed.path, params))
                status, body, headers = fake._answer(parsed.path, params)
                send_json(self, status, body, headers)

        return Handler
