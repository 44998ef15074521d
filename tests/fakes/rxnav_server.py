"""A local fake of NLM's RxNav (the RxNorm and RxClass APIs) on 127.0.0.1 (a random port).

    with FakeRxNav() as fake:
        fake.add_drug("warfarin", "11289", brands=["Coumadin"], classes=["Vitamin K Antagonist"])
        settings = WorkflowSettings(rxnav_url=fake.url)

Serves, in the shapes of the RxNav REST documentation (lhncbc.nlm.nih.gov/RxNav/APIs):
``/REST/rxcui.json?name=`` (``{"idGroup": {"name", "rxnormId": [...]}}``, no ``rxnormId`` for an unknown
name), ``/REST/approximateTerm.json?term=`` (``{"approximateGroup": {"inputTerm", "candidate": [{"rxcui",
"rxaui", "score", "rank", "name", "source"}]}}``, the closest known name by spelling),
``/REST/rxcui/<id>/properties.json`` (``{"properties": {"rxcui", "name", "synonym", "tty", "language",
"suppress"}}``), ``/REST/rxcui/<id>/related.json?tty=BN`` (``{"relatedGroup": {"rxcui", "termType",
"conceptGroup": [{"tty": "BN", "conceptProperties": [{"rxcui", "name", "tty"}]}]}}``) and
``/REST/rxclass/class/byRxcui.json?rxcui=`` (``{"rxclassDrugInfoList": {"rxclassDrugInfo": [{"minConcept",
"rxclassMinConceptItem": {"classId", "className", "classType": "EPC"}, "rela": "has_EPC", "relaSource":
"DAILYMED"}]}}``, an empty object for none). An unknown path is 404; ``fail_status`` makes every answer that
status. Every request is recorded. The drugs are whatever a test registers.
"""

from __future__ import annotations

import difflib
import urllib.parse
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.fakes.http import LocalHttpServer, QuietHandler, send_json


@dataclass
class FakeDrug:
    name: str
    rxcui: str
    brands: list[str] = field(default_factory=list)
    classes: list[str] = field(default_factory=list)


class FakeRxNav(LocalHttpServer):
    thread_name = "fake-rxnav"

    def __init__(self) -> None:
        super().__init__()
        self.drugs: dict[str, FakeDrug] = {}
        self.requests: list[tuple[str, dict[str, list[str]]]] = []
        self.fail_status: int | None = None

    def add_drug(
        self, name: str, rxcui: str, *, brands: list[str] | None = None, classes: list[str] | None = None
    ) -> None:
        self.drugs[name.lower()] = FakeDrug(name.lower(), rxcui, brands or [], classes or [])

    def _by_id(self, rxcui: str) -> FakeDrug | None:
        return next((d for d in self.drugs.values() if d.rxcui == rxcui), None)

    def _named(self, name: str) -> FakeDrug | None:
        name = name.lower()
        return self.drugs.get(name) or next(
            (d for d in self.drugs.values() if name in (b.lower() for b in d.brands)), None
        )

    def _answer(self, path: str, params: dict[str, list[str]]) -> tuple[int, dict[str, Any]]:
        if self.fail_status is not None:
            return self.fail_status, {"error": "injected failure"}
        one = {k: v[0] for k, v in params.items() if v}
        if path == "/REST/rxcui.json":
            drug = self._named(one.get("name", ""))
            return 200, {"idGroup": {"name": one.get("name", ""), **({"rxnormId": [drug.rxcui]} if drug else {})}}
        if path == "/REST/approximateTerm.json":
            term = one.get("term", "").lower()
            close = difflib.get_close_matches(term, list(self.drugs), n=1, cutoff=0.75)
            group: dict[str, Any] = {"inputTerm": term, "maxEntries": one.get("maxEntries", "20")}
            if close:
                d = self.drugs[close[0]]
                group["candidate"] = [
                    {"rxcui": d.rxcui, "rxaui": "1", "score": "9.5", "rank": "1", "name": d.name, "source": "RXNORM"}
                ]
            return 200, {"approximateGroup": group}
        parts = path.split("/")
        if len(parts) == 5 and parts[:3] == ["", "REST", "rxcui"]:
            drug = self._by_id(parts[3])
            if parts[4] == "properties.json":
                if drug is None:
                    return 200, {}
                props = {"rxcui": drug.rxcui, "name": drug.name, "synonym": "", "tty": "IN", "language": "ENG"}
                return 200, {"properties": {**props, "suppress": "N"}}
            if parts[4] == "related.json":
                brands = (
                    [{"rxcui": f"9{i}{parts[3]}", "name": b, "tty": "BN"} for i, b in enumerate(drug.brands)]
                    if drug
                    else []
                )
                return 200, {
                    "relatedGroup": {
                        "rxcui": parts[3],
                        "termType": ["BN"],
                        "conceptGroup": [{"tty": "BN", **({"conceptProperties": brands} if brands else {})}],
                    }
                }
        if path == "/REST/rxclass/class/byRxcui.json":
            drug = self._by_id(one.get("rxcui", ""))
            if drug is None or not drug.classes:
                return 200, {}
            infos = [
                {
                    "minConcept": {"rxcui": drug.rxcui, "name": drug.name, "tty": "IN"},
                    "rxclassMinConceptItem": {"classId": f"N{i:010d}", "className": c, "classType": "EPC"},
                    "rela": "has_EPC",
                    "relaSource": "DAILYMED",
                }
                for i, c in enumerate(drug.classes)
            ]
            return 200, {"rxclassDrugInfoList": {"rxclassDrugInfo": infos}}
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
