"""Data for the workflow integration tests: real PubMed text on the fake E-utilities, and the CC0 malaria
guideline fixture ingested as Bookshelf NXML.

- PubMed: three real abstracts mentioning metformin from the bundled PubMedQA sample
  (``data/samples/pubmedqa500.jsonl``, MIT; PubMed text), served as ``PubmedArticle`` records by the fake
  E-utilities together with the searches the evidence workflow runs for metformin + polycystic ovary syndrome.
- Guidelines: ``tests/fixtures/bookshelf/malaria-guideline.nxml`` (hand-written, CC0) with an NBK accession
  added to each chapter, as real Bookshelf parts carry (``book-part-id`` of type accession): its parts
  become the documents ``bookshelf:NBK99900N``, citable as ``[NBK:NBK99900N]``.
"""

from __future__ import annotations

import asyncio
import json
import time
from html import escape
from pathlib import Path

import httpx
from faststream.kafka import KafkaBroker

from shared.events import DocumentFetched
from shared.kafka.topics import DOCUMENTS_FETCHED
from shared.sources.fdalabel_document import label_document
from tests.fakes.openfda_server import load
from tests.integration.conftest import Stack

ROOT = Path(__file__).resolve().parents[2]
METFORMIN_PMIDS = ["21593045", "15125825", "21801416"]
DRUG, DISEASE = "metformin", "polycystic ovary syndrome"
MAIN_QUERY = 'metformin AND ("polycystic ovary syndrome" OR PCOS)'
ORGAN_QUERY = "metformin AND ovary"
GUIDELINE_CHUNKS = 14


def pubmed_set(pmids: list[str]) -> bytes:
    docs = {}
    for line in (ROOT / "data" / "samples" / "pubmedqa500.jsonl").read_text().split("\n"):
        if not line.strip():
            continue
        d = json.loads(line)
        if d["source_id"] in pmids:
            docs[d["source_id"]] = d
    parts = ['<?xml version="1.0" ?>\n<PubmedArticleSet>']
    for pmid in pmids:
        d = docs[pmid]
        mesh = "".join(
            f'<MeshHeading><DescriptorName UI="D0">{escape(m["descriptor"] if isinstance(m, dict) else m)}'
            "</DescriptorName></MeshHeading>"
            for m in d.get("mesh") or []
        )
        parts.append(
            f'<PubmedArticle><MedlineCitation Status="MEDLINE" Owner="NLM"><PMID Version="1">{pmid}</PMID>'
            '<Article PubModel="Print"><Journal><JournalIssue CitedMedium="Print"><PubDate>'
            f"<Year>{d.get('year') or 2010}</Year></PubDate></JournalIssue><Title>Sample Journal</Title></Journal>"
            f"<ArticleTitle>{escape(d['title'])}</ArticleTitle><Abstract><AbstractText>{escape(d['abstract'])}"
            "</AbstractText></Abstract><Language>eng</Language><PublicationTypeList>"
            '<PublicationType UI="D016428">Journal Article</PublicationType></PublicationTypeList></Article>'
            f"<MeshHeadingList>{mesh}</MeshHeadingList></MedlineCitation><PubmedData><ArticleIdList>"
            f'<ArticleId IdType="pubmed">{pmid}</ArticleId></ArticleIdList></PubmedData></PubmedArticle>'
        )
    parts.append("</PubmedArticleSet>")
    return "".join(parts).encode()


def serve_metformin(stack: Stack) -> None:
    stack.fake.add_pubmed_records(pubmed_set(METFORMIN_PMIDS))
    stack.fake.add_search(MAIN_QUERY, METFORMIN_PMIDS[:2])
    stack.fake.add_search(ORGAN_QUERY, METFORMIN_PMIDS[2:])


def guideline_nxml() -> str:
    text = (ROOT / "tests" / "fixtures" / "bookshelf" / "malaria-guideline.nxml").read_text()
    for n in range(1, 5):
        old = f'<book-part id="ch{n}" book-part-type="chapter">\n      <book-part-meta>'
        assert old in text
        text = text.replace(old, old + f'<book-part-id book-part-id-type="accession">NBK99900{n}</book-part-id>')
    return text


async def _publish(bootstrap: str, event: DocumentFetched) -> None:
    broker = KafkaBroker(bootstrap)
    await broker.start()
    try:
        await broker.publish(event, topic=DOCUMENTS_FETCHED, key=event.document_id.encode())
    finally:
        await broker.stop()


def ingest_guideline(stack: Stack, timeout: float = 240.0) -> None:
    """Publish the guideline and wait until all its chunks are searchable (dense, guideline sources only)."""
    with stack.http() as http:
        if _guideline_hits(http) >= GUIDELINE_CHUNKS:
            return
    event = DocumentFetched(
        document_id="bookshelf:NBK999000",
        source="bookshelf",
        source_id="NBK999000",
        format="bookshelf-nxml",
        content=guideline_nxml(),
    )
    asyncio.run(_publish(stack.infra.kafka.bootstrap, event))
    deadline = time.monotonic() + timeout
    with stack.http() as http:
        while _guideline_hits(http) < GUIDELINE_CHUNKS:
            assert time.monotonic() < deadline, "the guideline was not indexed in time"
            time.sleep(1)


def _guideline_hits(http: httpx.Client) -> int:
    r = http.post(
        "/v1/search",
        json={
            "query": "malaria treatment",
            "mode": "dense",
            "top_k": 50,
            "top_n": 50,
            "filters": {"sources": ["bookshelf"]},
        },
    )
    return len(r.json().get("hits", [])) if r.status_code == 200 else 0


def ingest_labels(stack: Stack) -> None:
    """Import the fixture FDA labels (``tests/fixtures/openfda``) inline, as documents, and wait until stored."""
    documents = [label_document(label).model_dump(mode="json") for label in load("labels.json")]
    with stack.http() as http:
        r = http.post("/v1/ingest", json={"documents": documents})
    assert r.status_code == 202, r.text
    status = stack.wait_job(r.json()["job_id"])
    assert status["done"] and status["state"] != "failed", status
