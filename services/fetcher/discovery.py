"""Discovery of PMIDs for an ingest request, independent of Kafka: the job's bookkeeping around the sources
whose discovery finds PMIDs (PubMed, PMC; see :mod:`services.fetcher.sources`).

Resume: every step is idempotent. A recorded search answers a repeated request inside the TTL, PMIDs
already in ``documents`` are not returned again (unless ``refresh``; see :mod:`services.fetcher.store`),
job rows are upserted and stages never move backwards (see :mod:`shared.db.jobs`). A fetcher killed
mid-job gets the same ``IngestRequested`` / ``PmidDiscovered`` events again from Kafka (offsets are
committed after the work) and only re-does what was not stored; each document is stored once because
its id (``pubmed:<pmid>``) is the key everywhere.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from services.fetcher import store
from services.fetcher.eutils import EutilsError, EutilsUnavailable
from services.fetcher.sources.base import FetchSource
from shared.db import jobs
from shared.db.jobs import Db, dedupe
from shared.events import IngestRequested
from shared.models import document_id
from shared.sources.pubmed import PUBMED

log = logging.getLogger(__name__)


async def discover(req: IngestRequested, sources: Mapping[str, FetchSource[str]], pool: Db) -> list[str]:
    """The PMIDs of the parts of ``req`` at ``sources`` that still need fetching, in order, each once.

    Creates the job row (if the gateway did not), runs or reuses each part's search, adds the given ids,
    attaches every found document to the job (already stored ones too, so the job's counts show them), marks
    the new ones ``discovered`` and the job ``discovered``. An NCBI error marks the job ``failed`` with the
    reason and is raised again (an outage only is raised: the request is retried, the job goes on).
    """
    parts = [p for p in req.sources if p.source in sources]
    kind = "query" if any(p.query for p in parts) else "pmids"
    await jobs.create_job(
        pool, req.job_id, kind, req.model_dump(mode="json", include={"sources", "max_results", "refresh"})
    )
    try:
        found: list[str] = []
        for part in parts:
            found += await sources[part.source].discover(part, max_results=req.max_results, refresh=req.refresh)
        unique = dedupe(found)
        new = await store.filter_new_pmids(pool, unique, req.refresh)
        await jobs.add_job_documents(pool, req.job_id, [document_id(PUBMED.name, p) for p in unique])
        await jobs.set_stage(pool, [document_id(PUBMED.name, p) for p in new], "discovered", force=req.refresh)
    except EutilsError as exc:
        if not isinstance(exc, EutilsUnavailable):
            await jobs.set_job_state(pool, req.job_id, "failed", str(exc))
        raise
    await jobs.set_job_state(pool, req.job_id, "discovered")
    log.info(
        "discovered",
        extra={"job_id": req.job_id, "found": len(unique), "new": len(new), "stored": len(unique) - len(new)},
    )
    return new
