"""PMC full text and Bookshelf through the running fetcher: POST /v1/ingest -> Kafka -> parsed, chunked, embedded.

Both sources come from the fake E-utilities server: an open-access JATS article (elink ``pubmed_pmc`` +
``efetch db=pmc``) and a Bookshelf ``file_list.csv`` with one ``.tar.gz`` package (static files under
``/pub/litarch/``, where the ``stack`` fixture points ``EVIDENTIA_BOOKSHELF_*``).

Everything a test adds is taken away again at its end (the fake's PubMed record, the stored documents), so
the session's other tests see the corpus they expect: ``test_pipeline`` ingests every PubMed record of the
fake and ``test_workflows`` publishes its own copy of the malaria guideline.
"""

from __future__ import annotations

import io
import tarfile
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import pytest
from lxml import etree

from tests.integration.conftest import Stack
from tests.integration.db import db_fetch

pytestmark = [pytest.mark.integration, pytest.mark.slow]

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
PMC_ARTICLE = FIXTURES / "pmc" / "pone.0046493.nxml"  # open access, PMID 23029536, PMCID PMC3460867
PMID = "23029536"
PMCID = "PMC3460867"
NBK = "NBK998001"  # the package's accession (file list)
PART = "NBK99810"  # the chapters' accessions: NBK998101..NBK998104, the documents' ids
PUBLISHER = "World Health Organization"
TIMEOUT = 150.0


def delete_documents(url: str, sql_where: str, *args: object) -> None:
    """Remove documents (chunks, vectors and postings cascade) and their status rows."""
    rows = db_fetch(url, f"DELETE FROM documents WHERE {sql_where} RETURNING document_id", *args)
    ids = [r["document_id"] for r in rows]
    if ids:
        db_fetch(url, "DELETE FROM document_status WHERE document_id = ANY($1::text[])", ids)


def pubmed_record(template: bytes, pmid: str, title: str) -> bytes:
    """A PubMed record for ``pmid`` made from another one: new PMID and title, no abstract, no other ids."""
    root = etree.fromstring(template)
    citation = root.find("MedlineCitation")
    assert citation is not None
    pmid_node = citation.find("PMID")
    assert pmid_node is not None
    pmid_node.text = pmid
    article_title = citation.find("Article/ArticleTitle")
    assert article_title is not None
    for child in list(article_title):
        article_title.remove(child)
    article_title.text = title
    for node in citation.findall("Article/Abstract") + citation.findall("CommentsCorrectionsList"):
        node.getparent().remove(node)  # type: ignore[union-attr]
    for ids in root.iterfind("PubmedData/ArticleIdList"):
        for node in list(ids):
            ids.remove(node)
        etree.SubElement(ids, "ArticleId", IdType="pubmed").text = pmid
    record: bytes = etree.tostring(root)
    return b"<PubmedArticleSet>" + record + b"</PubmedArticleSet>"


@pytest.fixture
def pmc_article(stack: Stack) -> Iterator[None]:
    """The fake holds an open-access PMC article and (for now) a PubMed record of the same PMID."""
    fake = stack.fake
    assert fake.add_pmc_records(PMC_ARTICLE.read_bytes()) == [PMCID]
    template = next(x for x in fake._state.pubmed.values() if etree.fromstring(x).tag == "PubmedArticle")
    fake.add_pubmed_records(pubmed_record(template, PMID, "Full text test record"))
    try:
        yield
    finally:
        with fake._state.lock:
            fake._state.pubmed.pop(PMID, None)
        delete_documents(stack.infra.postgres.url, "document_id = ANY($1::text[])", [f"pubmed:{PMID}", f"pmc:{PMCID}"])


def guideline_nxml() -> bytes:
    """The fixture book with an accession on each chapter (as Bookshelf parts carry): NBK99810<n>."""
    text = (FIXTURES / "bookshelf" / "malaria-guideline.nxml").read_text("utf-8")
    for n in range(1, 5):
        old = f'<book-part id="ch{n}" book-part-type="chapter">\n      <book-part-meta>'
        assert old in text
        text = text.replace(old, old + f'<book-part-id book-part-id-type="accession">{PART}{n}</book-part-id>')
    return text.encode()


def bookshelf_package() -> bytes:
    data = guideline_nxml()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        directory = tarfile.TarInfo(NBK)
        directory.type = tarfile.DIRTYPE
        tar.addfile(directory)
        info = tarfile.TarInfo(f"{NBK}/{NBK}.nxml")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


@pytest.fixture
def bookshelf_book(stack: Stack) -> Iterator[None]:
    fake = stack.fake
    fake.add_static(
        "/pub/litarch/file_list.csv",
        (
            "File,Title,Publisher,Year,Accession ID,Last Updated (YYYY-MM-DD HH:MM:SS)\n"
            f"ab/cd/who_{NBK}.tar.gz,Guidelines for the treatment of malaria (test edition),{PUBLISHER},2024,"
            f"{NBK},2025-01-02 03:04:05\n"
            "ca/84/gene_NBK1116.tar.gz,GeneReviews,University of Washington,1993,NBK1116,2025-08-31 02:41:04\n"
        ).encode(),
        "text/csv",
    )
    fake.add_static(f"/pub/litarch/ab/cd/who_{NBK}.tar.gz", bookshelf_package(), "application/gzip")
    try:
        yield
    finally:
        delete_documents(stack.infra.postgres.url, "source = 'bookshelf' AND source_id LIKE $1", f"{PART}%")


def ingest(stack: Stack, body: dict[str, object]) -> dict[str, object]:
    with stack.http() as http:
        r = http.post("/v1/ingest", json=body)
        assert r.status_code == 202, r.text
        job_id = r.json()["job_id"]
    return stack.wait_job(job_id, timeout=TIMEOUT)


def embedded_chunks(url: str, document_id: str) -> list[asyncpg.Record]:
    table = db_fetch(url, "SELECT table_name FROM vector_indexes WHERE state = 'active'")[0]["table_name"]
    return db_fetch(
        url,
        f"""SELECT c.chunk_id, c.section, v.chunk_id AS vector FROM chunks c
            LEFT JOIN {table} v ON v.chunk_id = c.chunk_id WHERE c.document_id = $1 ORDER BY c.ordinal""",
        document_id,
    )


def test_pmc_full_text_is_fetched_with_the_pubmed_record(stack: Stack, pmc_article: None) -> None:
    status = ingest(stack, {"pmids": [PMID], "full_text": True, "refresh": True})
    assert status["done"] and status["state"] == "done", status
    assert status["total"] == 2, status  # pubmed:<pmid> and pmc:<pmcid>
    assert status["counts"]["embedded"] == 2 and not status["failures"], status  # type: ignore[index]

    url = stack.infra.postgres.url
    rows = db_fetch(
        url,
        """SELECT document_id, source, pmid, jsonb_array_length(metadata->'sections') AS sections
           FROM documents WHERE document_id = $1""",
        f"pmc:{PMCID}",
    )
    assert len(rows) == 1
    assert rows[0]["source"] == "pmc" and rows[0]["pmid"] == PMID
    assert rows[0]["sections"] > 1
    chunks = embedded_chunks(url, f"pmc:{PMCID}")
    assert len(chunks) > 1 and all(c["vector"] for c in chunks)
    reqs = stack.fake.requests_to("elink")
    assert any(r.param("dbfrom") == "pubmed" for r in reqs)


def test_bookshelf_publisher_is_ingested(stack: Stack, bookshelf_book: None) -> None:
    status = ingest(stack, {"bookshelf_publisher": PUBLISHER})
    assert status["done"] and status["state"] == "done", status
    assert status["kind"] == "bookshelf"
    assert status["total"] == 4 and not status["failures"], status  # the book's four chapters
    assert status["counts"]["embedded"] == 4, status  # type: ignore[index]

    url = stack.infra.postgres.url
    docs = db_fetch(url, "SELECT document_id, source, title FROM documents WHERE source_id LIKE $1", f"{PART}%")
    assert sorted(d["document_id"] for d in docs) == [f"bookshelf:{PART}{n}" for n in range(1, 5)]
    assert all(d["source"] == "bookshelf" for d in docs)
    sections = [c["section"] for d in docs for c in embedded_chunks(url, d["document_id"])]
    assert sections
    assert any(s and " > " in s for s in sections), sections  # title paths: chapter > section
    assert all("PREFACE-SENTINEL" not in (s or "") for s in sections)
    requested = [r for r in stack.fake.requests if "/pub/litarch/" in r.path]
    assert not any("NBK1116" in r.path for r in requested)  # another publisher's package is not downloaded
