"""The one list of Evidentia's services: name, default port, topics consumed and produced.

Everything that needs to know which services exist reads this list: the services themselves (their
default metrics/probe port), the local supervisor (``devstack.processes``, ``evidentia serve``), the
contract generator (``docgen.contracts``) and the tests. A port belongs to a service, never to its
position in a list of names: starting any subset gives each service the same port.
"""

from __future__ import annotations

from dataclasses import dataclass

from shared.kafka.topics import (
    BOOKSHELF_PACKAGES,
    CHUNKS_CREATED,
    CHUNKS_EMBEDDED,
    CHUNKS_REINDEX,
    DOCUMENTS_FETCHED,
    INGEST_REQUESTS,
    LLM_STEP_REQUESTS,
    NCBI_REQUESTS,
    PMIDS_DISCOVERED,
    RETRIEVAL_REQUESTS,
    SYNTHESIS_REQUESTS,
)


@dataclass(frozen=True)
class ServiceSpec:
    """One service: its module ``services.<name>``, its HTTP port, the topics it reads and writes."""

    name: str
    port: int
    consumes: tuple[str, ...] = ()
    produces: tuple[str, ...] = ()
    event_driven: bool = True
    """True for the FastStream consumers (they have an AsyncAPI document); False for the HTTP gateway."""

    @property
    def module(self) -> str:
        return f"services.{self.name}"


SERVICE_SPECS: tuple[ServiceSpec, ...] = (
    ServiceSpec(
        "fetcher",
        9101,
        consumes=(INGEST_REQUESTS, PMIDS_DISCOVERED, BOOKSHELF_PACKAGES, NCBI_REQUESTS),
        produces=(PMIDS_DISCOVERED, BOOKSHELF_PACKAGES, DOCUMENTS_FETCHED),
    ),
    ServiceSpec("parser", 9102, consumes=(DOCUMENTS_FETCHED,), produces=(CHUNKS_CREATED,)),
    ServiceSpec("embedder", 9103, consumes=(CHUNKS_CREATED, CHUNKS_REINDEX), produces=(CHUNKS_EMBEDDED,)),
    ServiceSpec("retriever", 9104, consumes=(CHUNKS_EMBEDDED, RETRIEVAL_REQUESTS)),
    ServiceSpec("synthesizer", 9105, consumes=(SYNTHESIS_REQUESTS, LLM_STEP_REQUESTS)),
    ServiceSpec(
        "gateway",
        8000,
        produces=(
            INGEST_REQUESTS,
            DOCUMENTS_FETCHED,
            RETRIEVAL_REQUESTS,
            SYNTHESIS_REQUESTS,
            LLM_STEP_REQUESTS,
            NCBI_REQUESTS,
        ),
        event_driven=False,
    ),
)

SERVICES: tuple[str, ...] = tuple(s.name for s in SERVICE_SPECS)
"""Every service name, in start order (producers of the pipeline first, the gateway last)."""

EVENT_SERVICES: tuple[str, ...] = tuple(s.name for s in SERVICE_SPECS if s.event_driven)
"""The FastStream services (each has ``services.<name>.app`` and an AsyncAPI document)."""

DEFAULT_PORTS: dict[str, int] = {s.name: s.port for s in SERVICE_SPECS}


def spec(name: str) -> ServiceSpec:
    """The service called ``name``; ``KeyError`` naming the known ones otherwise."""
    for s in SERVICE_SPECS:
        if s.name == name:
            return s
    raise KeyError(f"unknown service {name!r}; known: {', '.join(SERVICES)}")
