"""Drug names as RxNorm concepts, from NLM's RxNav (``EVIDENTIA_WORKFLOW_RXNAV_URL``): what the drug interaction
check (:mod:`.interactions`) looks each drug up by.

The RxNorm API: ``GET /REST/rxcui.json?name=<name>&search=2`` -> ``{"idGroup": {"rxnormId": ["..."]}}`` (an
exact or normalised match), else ``GET /REST/approximateTerm.json?term=<name>&maxEntries=1`` ->
``{"approximateGroup": {"candidate": [{"rxcui", "score", "rank", "name"?}]}}`` (a misspelling);
``GET /REST/rxcui/<id>/properties.json`` -> ``{"properties": {"rxcui", "name", "tty"}}`` (the concept's
name); ``GET /REST/rxcui/<id>/related.json?tty=BN`` -> ``{"relatedGroup": {"conceptGroup": [{"tty": "BN",
"conceptProperties": [{"name"}]}]}}`` (its brand names); and RxClass ``GET
/REST/rxclass/class/byRxcui.json?rxcui=<id>&relaSources=DAILYMED`` -> ``{"rxclassDrugInfoList":
{"rxclassDrugInfo": [{"rxclassMinConceptItem": {"className", "classType"}}]}}`` (its established
pharmacologic classes, the ``EPC`` ones labels name). A name RxNorm does not know is kept as given; RxNav
unset or failing is said (the check then looks drugs up by the names given), never guessed around.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import httpx

from services.gateway.errors import new_error_id

log = logging.getLogger(__name__)

#: The most brand names and classes kept of one concept.
MAX_NAMES = 12


@dataclass(frozen=True)
class DrugConcept:
    """A drug as the check knows it: the name asked about, its RxNorm concept (when RxNorm knows it), and
    the other names a label may call it by (RxNorm's name, brand names) and its pharmacologic classes."""

    query: str
    rxcui: str | None = None
    name: str | None = None
    brands: tuple[str, ...] = ()
    classes: tuple[str, ...] = ()

    @property
    def names(self) -> list[str]:
        """Every name of the drug (lower case, the one asked about first)."""
        found = [self.query, self.name or "", *self.brands]
        return list(dict.fromkeys(n.strip().lower() for n in found if n and n.strip()))


@dataclass
class Normalised:
    """The concepts of some drug names, and what went wrong looking them up (None: nothing)."""

    concepts: list[DrugConcept] = field(default_factory=list)
    error: str | None = None


class RxNavClient:
    """RxNav's RxNorm and RxClass lookups; ``base_url`` None: not configured (drugs stay as named)."""

    def __init__(self, base_url: str | None, *, timeout_s: float = 10.0, http: httpx.AsyncClient | None = None):
        self.base_url = base_url.rstrip("/") if base_url else None
        self.timeout_s = timeout_s
        self._http = http

    @property
    def configured(self) -> bool:
        return self.base_url is not None

    async def _get(self, client: httpx.AsyncClient, path: str, params: dict[str, str]) -> dict[str, Any]:
        r = await client.get(f"{self.base_url}{path}", params=params, timeout=self.timeout_s)
        r.raise_for_status()
        data = r.json()
        return data if isinstance(data, dict) else {}

    async def normalise(self, drugs: list[str]) -> Normalised:
        """Each name (trimmed, lower case, once) as a :class:`DrugConcept`."""
        names = list(dict.fromkeys(d.strip().lower() for d in drugs if d and d.strip()))
        out = Normalised([DrugConcept(n) for n in names])
        if not self.configured or not names:
            return out
        client = self._http or httpx.AsyncClient()
        try:
            out.concepts = [await self._concept(client, n) for n in names]
        except (httpx.HTTPError, ValueError) as exc:
            # The client learns that it failed and an id; the detail (addresses, bodies) stays in the log.
            error_id = new_error_id()
            log.warning("RxNav failed", extra={"error": repr(exc)[:300], "error_id": error_id})
            out.error = f"RxNorm could not be reached ({type(exc).__name__}; error id {error_id})"
        finally:
            if self._http is None:
                await client.aclose()
        return out

    async def _concept(self, client: httpx.AsyncClient, name: str) -> DrugConcept:
        data = await self._get(client, "/REST/rxcui.json", {"name": name, "search": "2"})
        ids = _strings((data.get("idGroup") or {}).get("rxnormId"))
        if not ids:
            data = await self._get(client, "/REST/approximateTerm.json", {"term": name, "maxEntries": "1"})
            candidates = (data.get("approximateGroup") or {}).get("candidate")
            ids = [str(c["rxcui"]) for c in candidates or [] if isinstance(c, dict) and c.get("rxcui")][:1]
        if not ids:
            return DrugConcept(name)
        rxcui = ids[0]
        props = (await self._get(client, f"/REST/rxcui/{rxcui}/properties.json", {})).get("properties") or {}
        related = await self._get(client, f"/REST/rxcui/{rxcui}/related.json", {"tty": "BN"})
        brands = [
            str(p.get("name"))
            for g in (related.get("relatedGroup") or {}).get("conceptGroup") or []
            if isinstance(g, dict)
            for p in g.get("conceptProperties") or []
            if isinstance(p, dict) and p.get("name")
        ]
        classes_data = await self._get(
            client, "/REST/rxclass/class/byRxcui.json", {"rxcui": rxcui, "relaSources": "DAILYMED"}
        )
        classes = [
            str(item.get("className"))
            for info in (classes_data.get("rxclassDrugInfoList") or {}).get("rxclassDrugInfo") or []
            if isinstance(info, dict)
            for item in [info.get("rxclassMinConceptItem") or {}]
            if isinstance(item, dict) and item.get("className") and item.get("classType") == "EPC"
        ]
        return DrugConcept(
            name,
            rxcui,
            str(props.get("name")) if isinstance(props, dict) and props.get("name") else None,
            tuple(dict.fromkeys(brands))[:MAX_NAMES],
            tuple(dict.fromkeys(classes))[:MAX_NAMES],
        )


def _strings(value: Any) -> list[str]:
    return [str(v) for v in value if isinstance(v, (str, int))] if isinstance(value, list) else []
