"""Offline ingestion: a gzipped baseline-format file, a directory of JATS/NXML, JSON lines."""

from __future__ import annotations

import gzip
import io
import json
import shutil
from pathlib import Path

import pytest

from services.fetcher.bulk import BulkProblem, iter_jsonl, iter_pubmed_file, iter_xml_dir
from shared.events import DocumentDeleted, DocumentFetched
from shared.ingestion import document_event
from shared.models import ParsedDocument
from shared.xmlsafe import MalformedXmlError, iter_pubmed_records
from tests.fakes.eutils_server import DEFAULT_RECORDS_DIR as FIXTURES

RECORDED_SETS = ["pubmed1.xml", "pubmed2.xml", "pubmed4.xml", "efetch.pubmedexample.xml"]


def _baseline_bytes() -> tuple[bytes, list[str]]:
    """A baseline-format set: the recorded records, then a DeleteCitation of two PMIDs."""
    records: list[bytes] = []
    pmids: list[str] = []
    for name in RECORDED_SETS:
        for record in iter_pubmed_records(str(FIXTURES / name)):
            records.append(record.xml)
            pmids.append(record.pmids[0])
    body = (
        b'<?xml version="1.0" encoding="utf-8"?>\n'
        b'<!DOCTYPE PubmedArticleSet PUBLIC "-//NLM//DTD PubMedArticle, 1st January 2025//EN" '
        b'"https://dtd.nlm.nih.gov/ncbi/pubmed/out/pubmed_250101.dtd">\n<PubmedArticleSet>\n'
        + b"\n".join(records)
        + b'\n<DeleteCitation>\n<PMID Version="1">30000001</PMID>\n<PMID Version="1">30000002</PMID>\n'
        b"</DeleteCitation>\n</PubmedArticleSet>\n"
    )
    return body, pmids


@pytest.fixture
def baseline_gz(tmp_path: Path) -> tuple[Path, list[str]]:
    body, pmids = _baseline_bytes()
    path = tmp_path / "pubmed25n0001.xml.gz"
    path.write_bytes(gzip.compress(body))
    return path, pmids


def test_gzipped_baseline_file_streams_articles_and_deletions(baseline_gz: tuple[Path, list[str]]) -> None:
    path, pmids = baseline_gz
    events = list(iter_pubmed_file(path, job_id="job-1", trace_id="trace-1"))
    fetched = [e for e in events if isinstance(e, DocumentFetched)]
    deleted = [e for e in events if isinstance(e, DocumentDeleted)]
    assert [e.source_id for e in fetched] == pmids
    assert [e.document_id for e in deleted] == ["pubmed:30000001", "pubmed:30000002"]
    assert events[-2:] == deleted  # file order is kept
    for event in fetched:
        assert event.document_id == f"pubmed:{event.source_id}" and event.format == "pubmed-xml"
        assert event.content and event.content.startswith(("<PubmedArticle>", "<PubmedBookArticle>"))
        assert f">{event.source_id}</PMID>" in event.content
        assert event.job_id == "job-1" and event.trace_id == "trace-1"
    assert any(e.content and e.content.startswith("<PubmedBookArticle>") for e in fetched)


def test_plain_baseline_and_file_objects(tmp_path: Path) -> None:
    body, pmids = _baseline_bytes()
    plain = tmp_path / "pubmed25n0002.xml"
    plain.write_bytes(body)
    assert [e.source_id for e in iter_pubmed_file(plain) if isinstance(e, DocumentFetched)] == pmids
    from_stream = list(iter_pubmed_file(io.BytesIO(body)))
    assert len(from_stream) == len(pmids) + 2


def test_streaming_is_lazy_and_a_cut_file_fails_after_the_good_records(tmp_path: Path) -> None:
    body, pmids = _baseline_bytes()
    cut = tmp_path / "cut.xml.gz"
    cut.write_bytes(gzip.compress(body[: len(body) * 2 // 3]))
    seen: list[str] = []
    with pytest.raises((MalformedXmlError, EOFError)):
        for event in iter_pubmed_file(cut):
            seen.append(event.source_id)
    assert seen and seen == pmids[: len(seen)]


def _book_part(accession: str | None, title: str = "Guideline chapter") -> bytes:
    ident = f' id="{accession}"' if accession else ""
    return (
        f'<?xml version="1.0" encoding="UTF-8"?>\n<book-part-wrapper dtd-version="2.0">'
        f"<book-meta><book-title-group><book-title>WHO guideline</book-title></book-title-group></book-meta>"
        f'<book-part book-part-type="chapter"{ident}><book-part-meta><title-group><title>{title}</title>'
        f"</title-group></book-part-meta><body><sec><title>Recommendations</title><p>Text.</p></sec></body>"
        f"</book-part></book-part-wrapper>"
    ).encode()


def test_directory_of_jats_and_nxml_by_root_element(tmp_path: Path) -> None:
    shutil.copy(FIXTURES / "pone.0000217.nxml", tmp_path / "a.nxml")
    (tmp_path / "sub").mkdir()
    shutil.copy(FIXTURES / "1472-6831-8-11.nxml", tmp_path / "sub" / "b.nxml")
    (tmp_path / "c_efetch.xml.gz").write_bytes(gzip.compress((FIXTURES / "efetch_pmc.xml").read_bytes()))
    (tmp_path / "d_book.nxml").write_bytes(_book_part("NBK12345"))
    (tmp_path / "NBK777.nxml").write_bytes(_book_part(None))
    (tmp_path / "e_pubmed.xml").write_bytes((FIXTURES / "pubmed2.xml").read_bytes())
    (tmp_path / "f_broken.xml").write_bytes(b"<article><front>")
    (tmp_path / "g_nopmc.nxml").write_bytes(b"<article><front><article-meta/></front></article>")
    (tmp_path / "h_other.xml").write_bytes(b"<html><body/></html>")
    (tmp_path / "notes.txt").write_text("ignored")

    items = list(iter_xml_dir(tmp_path, job_id="j"))
    events = {e.document_id: e for e in items if isinstance(e, DocumentFetched)}
    problems = {p.source: p.message for p in items if isinstance(p, BulkProblem)}

    assert set(events) == {
        "pmc:PMC1790863",
        "pmc:PMC2329613",
        "pmc:PMC8435807",
        "bookshelf:NBK12345",
        "bookshelf:NBK777",
        "pubmed:11748933",
        "pubmed:11700088",
    }
    assert events["pmc:PMC1790863"].format == "jats-xml" and events["pmc:PMC1790863"].source == "pmc"
    assert "<?properties open_access?>" in (events["pmc:PMC1790863"].content or "")
    assert events["bookshelf:NBK12345"].format == "bookshelf-nxml"
    assert events["pubmed:11748933"].format == "pubmed-xml"
    assert all(e.job_id == "j" for e in events.values())
    assert set(problems) == {"f_broken.xml", "g_nopmc.nxml", "h_other.xml"}
    assert "PMC id" in problems["g_nopmc.nxml"] and "<html>" in problems["h_other.xml"]


def test_jsonl_import_reports_bad_lines_and_goes_on(tmp_path: Path) -> None:
    full = {
        "source": "pubmed",
        "source_id": "123",
        "pmid": "123",
        "title": "Metformin in type 2 diabetes",
        "abstract": "We studied...",
        "year": 2020,
        "mesh": [{"descriptor": "Metformin", "major": True}],
    }
    lines = [
        json.dumps(full),
        json.dumps({"source_id": "local-1", "title": "Minimal record"}),
        "{not json",
        "",
        json.dumps({"source_id": "x2"}),
        json.dumps(["a", "list"]),
        json.dumps({"source_id": "x3", "title": "Bad year", "year": "soon"}),
        json.dumps({"source": "pmc", "source_id": "PMC9", "title": "From PMC", "unknown_field": 1}),
    ]
    path = tmp_path / "docs.jsonl"
    path.write_text("\n".join(lines) + "\n")

    items = list(iter_jsonl(path, job_id="job-9"))
    events = [e for e in items if isinstance(e, DocumentFetched)]
    problems = [p for p in items if isinstance(p, BulkProblem)]
    assert [e.document_id for e in events] == ["pubmed:123", "pubmed:local-1", "pmc:PMC9"]
    assert all(e.format == "document-json" and e.document is not None and e.job_id == "job-9" for e in events)
    assert events[0].document is not None and events[0].document.mesh[0].descriptor == "Metformin"
    assert [(p.line, p.message.split(":")[0]) for p in problems] == [
        (3, "not JSON"),
        (5, "title is missing or empty"),
        (6, "expected a JSON object, got list"),
        (7, "year"),
    ]
    assert str(problems[0]).startswith(f"{path}:3: ")


def test_jsonl_gzipped_and_from_a_stream(tmp_path: Path) -> None:
    line = json.dumps({"source_id": "1", "title": "T"}) + "\n"
    gz = tmp_path / "docs.jsonl.gz"
    gz.write_bytes(gzip.compress(line.encode() * 2))
    assert len([e for e in iter_jsonl(gz) if isinstance(e, DocumentFetched)]) == 2
    assert len(list(iter_jsonl(io.StringIO(line)))) == 1


def test_a_json_lines_record_becomes_the_same_event_as_the_document_given_inline() -> None:
    record = {"source": "pmc", "source_id": "PMC7", "title": "Own", "abstract": "Text.", "year": 2020}
    (event,) = iter_jsonl(io.BytesIO(json.dumps(record).encode() + b"\n"), job_id="j-1", trace_id="t-1")
    assert isinstance(event, DocumentFetched)
    inline = document_event(ParsedDocument.model_validate(record), job_id="j-1", trace_id="t-1")
    assert event == inline.model_copy(update={"created_at": event.created_at})
