"""Drug interactions from an RxNav-style HTTP API (configurable: ``EVIDENTIA_WORKFLOW_RXNAV_URL``).

The API shape is the one the NLM RxNav REST service used: ``GET /REST/rxcui.json?name=<drug>`` ->
``{"idGroup": {"rxnormId": ["..."]}}`` and ``GET /REST/interaction/list.json?rxcuis=<id>+<id>`` ->
``{"fullInteractionTypeGroup": [{"sourceName", "fullInteractionType": [{"minConcept": [{"rxcui",
"name"}], "interactionPair": [{"severity", "description"}]}]}]}``. When no URL is configured, or the
service cannot be reached, the result says so plainly: the tool never guesses an interaction.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import httpx

from services.gateway.errors import new_error_id

log = logging.getLogger(__name__)

NOT_CONFIGURED = (
    "No drug interaction service is configured (EVIDENTIA_WORKFLOW_RXNAV_URL is unset), so interactions "
    "cannot be checked here. Do not assume there is none: ask a pharmacist or consult a drug interaction reference."
)


@dataclass
class Interaction:
    drugs: list[str]
    severity: str | None
    description: str
    source: str | None = None


@dataclass
class InteractionCheck:
    drugs: list[str]
    configured: bool
    resolved: dict[str, str] = field(default_factory=dict)
    """Drug name -> RxCUI, for the names the service knew."""
    unresolved: list[str] = field(default_factory=list)
    interactions: list[Interaction] = field(default_factory=list)
    error: str | None = None

    def text(self) -> str:
        if not self.configured:
            return NOT_CONFIGURED
        if self.error:
            return f"The drug interaction service could not be used ({self.error}); interactions were not checked."
        lines = []
        if self.unresolved:
            lines.append(f"Not found in the drug vocabulary: {', '.join(self.unresolved)}.")
        if len(self.resolved) < 2:
            lines.append("Fewer than two drugs were recognised, so no interaction could be checked.")
        elif not self.interactions:
            lines.append(f"The interaction service lists no interaction between {', '.join(self.resolved)}.")
        for i in self.interactions:
            sev = f" (severity: {i.severity})" if i.severity else ""
            src = f" [source: {i.source}]" if i.source else ""
            lines.append(f"{' + '.join(i.drugs)}{sev}: {i.description}{src}")
        return "\n".join(lines)


class RxNavClient:
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

    async def check(self, drugs: list[str]) -> InteractionCheck:
        names = list(dict.fromkeys(d.strip().lower() for d in drugs if d and d.strip()))
        out = InteractionCheck(names, self.configured)
        if not self.configured:
            return out
        client = self._http or httpx.AsyncClient()
        try:
            for name in names:
                data = await self._get(client, "/REST/rxcui.json", {"name": name})
                ids = (data.get("idGroup") or {}).get("rxnormId") or []
                if ids:
                    out.resolved[name] = str(ids[0])
                else:
                    out.unresolved.append(name)
            if len(out.resolved) >= 2:
                data = await self._get(
                    client, "/REST/interaction/list.json", {"rxcuis": " ".join(out.resolved.values())}
                )
                out.interactions = parse_interactions(data)
        except (httpx.HTTPError, ValueError) as exc:
            # The client learns that it failed and an id; the detail (addresses, bodies) stays in the log.
            error_id = new_error_id()
            log.warning("drug interaction service failed", extra={"error": repr(exc)[:300], "error_id": error_id})
            out.error = f"the drug interaction service failed ({type(exc).__name__}; error id {error_id})"
        finally:
            if self._http is None:
                await client.aclose()
        return out


def parse_interactions(data: dict[str, Any]) -> list[Interaction]:
    out: list[Interaction] = []
    for group in data.get("fullInteractionTypeGroup") or []:
        source = group.get("sourceName")
        for itype in group.get("fullInteractionType") or []:
            concepts = [str(c.get("name", "")) for c in itype.get("minConcept") or [] if c.get("name")]
            for pair in itype.get("interactionPair") or []:
                desc = str(pair.get("description") or "").strip()
                if desc:
                    sev = pair.get("severity")
                    out.append(Interaction(concepts, str(sev) if sev and sev != "N/A" else None, desc, source))
    return out
