"""Offline ingestion: PubMed baseline/update files, directories of JATS/NXML, JSON-lines documents.

Everything here is a plain (synchronous) generator that reads one record at a time, so a 4 GB
baseline directory goes through in bounded memory; run it in a thread (``asyncio.to_thread`` or an
executor) from async code. Each yields pipeline events:

- PubMed sets (``pubmedNNnXXXX.xml[.gz]``, or any efetch output): one :class:`DocumentFetched`
  (``pubmed-xml``, id ``pubmed:<pmid>``) per ``PubmedArticle``/``PubmedBookArticle`` and one
  :class:`DocumentDeleted` per PMID of a ``DeleteCitation``. Streamed with
  :func:`shared.xmlsafe.iter_pubmed_records` (lxml iterparse, cleared as it goes).
- A directory of XML files, told apart by their root element: ``article`` -> ``jats-xml`` with
  source ``pmc`` and the PMC id from ``article-id`` ``pub-id-type`` pmc/pmcid (a file without one
  is reported, not guessed); ``pmc-articleset`` -> each article; ``book-part-wrapper`` /
  ``book-part`` -> ``bookshelf-nxml`` (see :func:`bookshelf_source_id`); ``PubmedArticleSet`` ->
  as above. Local files are the user's own: no open-access filter is applied to them.
- JSON lines: each line one :class:`shared.models.ParsedDocument` object (at least ``source_id`` and
  a non-empty ``title``) -> ``DocumentFetched(format="document-json")``.

A record that cannot be used is yielded as a :class:`BulkProblem` (file, line or record number,
reason) and the stream goes on: one bad line never stops an import.
"""

from __future__ import annotations

import gzip
import json
import logging
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from lxml import etree
from pydantic import ValidationError

from services.fetcher.eutils import EutilsError, parse_pmc_articles
from shared.events import DocumentDeleted, DocumentFetched
from shared.ingestion import document_event
from shared.models import ParsedDocument, document_id
from shared.xmlsafe import MalformedXmlError, PubmedRecord, UnsafeXmlError, iter_pubmed_records, parse_xml

log = logging.getLogger(__name__)

MAX_JSONL_LINE_BYTES = 32 * 1024 * 1024
XML_SUFFIXES = (".xml", ".nxml", ".xml.gz", ".nxml.gz")
_NBK = re.compile(r"^NBK\d+$")
_PMID = re.compile(r"^[1-9][0-9]{0,9}$")


@dataclass(frozen=True)
class BulkProblem:
    """A record that was skipped, and why (``line`` for JSON lines, else None)."""

    source: str
    line: int | None
    message: str

    def __str__(self) -> str:
        where = f"{self.source}:{self.line}" if self.line is not None else self.source
        return f"{where}: {self.message}"


PubmedEvent = DocumentFetched | DocumentDeleted
BulkItem = DocumentFetched | DocumentDeleted | BulkProblem


# ------------------------------------------------------------------------------------------ PubMed


def record_to_events(
    record: PubmedRecord, *, job_id: str | None = None, trace_id: str | None = None
) -> list[PubmedEvent]:
    """One PubMed record -> its events (a ``DeleteCitation`` may name several PMIDs)."""
    extra = {"trace_id": trace_id} if trace_id else {}
    if record.kind == "delete":
        return [
            DocumentDeleted(
                document_id=document_id("pubmed", pmid),
                source="pubmed",
                source_id=pmid,
                job_id=job_id,
                **extra,
            )
            for pmid in record.pmids
            if _PMID.match(pmid)
        ]
    pmid = record.pmids[0] if record.pmids else ""
    if not _PMID.match(pmid):
        raise ValueError(f"PubMed record without a valid PMID ({pmid!r})")
    return [
        DocumentFetched(
            document_id=document_id("pubmed", pmid),
            source="pubmed",
            source_id=pmid,
            format="pubmed-xml",
            content=record.xml.decode("utf-8"),
            job_id=job_id,
            **extra,
        )
    ]


def iter_pubmed_file(
    source: str | os.PathLike[str] | bytes | IO[bytes],
    *,
    job_id: str | None = None,
    trace_id: str | None = None,
) -> Iterator[PubmedEvent]:
    """Stream a PubMed set (baseline/update file, plain or gzipped, or efetch output) as events.

    Raises :class:`shared.xmlsafe.MalformedXmlError` if the file is cut short; the events before
    the damage have been yielded by then.
    """
    src: str | bytes | IO[bytes] = os.fspath(source) if isinstance(source, os.PathLike) else source
    for record in iter_pubmed_records(src):
        try:
            yield from record_to_events(record, job_id=job_id, trace_id=trace_id)
        except ValueError as exc:
            log.warning("PubMed record skipped", extra={"error": str(exc)})


# ------------------------------------------------------------------------------------------ JATS / NXML


def bookshelf_source_id(root: etree._Element, filename: str, accession: str | None = None) -> str:
    """The Bookshelf id of an NXML part: an ``NBKnnn`` found in the XML, else from the names.

    Looked for, in order: ``@id`` of the root or of a ``book-part``, the text of ``book-part-id`` /
    ``book-id``; then the file name (``NBK1116.nxml``); then ``<accession>`` when the file name is
    the accession or ``<accession>_<file stem>`` (a package with several parts).
    """
    candidates: list[str] = [root.get("id") or ""]
    candidates += [node.get("id") or "" for node in root.iter("book-part")]
    candidates += [(node.text or "").strip() for node in root.iter("book-part-id", "book-id")]
    for value in candidates:
        if _NBK.match(value.strip()):
            return value.strip()
    stem = Path(filename).name.split(".", 1)[0]
    if _NBK.match(stem):
        return stem
    if accession:
        return accession if stem in ("", accession) else f"{accession}_{stem}"
    raise ValueError("no NBK accession in the file or its name")


def xml_to_events(
    data: bytes,
    name: str,
    *,
    accession: str | None = None,
    job_id: str | None = None,
    trace_id: str | None = None,
) -> list[DocumentFetched]:
    """One JATS / Bookshelf NXML document (already in memory) -> its events; ValueError if unusable."""
    extra = {"trace_id": trace_id} if trace_id else {}
    try:
        root = parse_xml(data)
    except (MalformedXmlError, UnsafeXmlError) as exc:
        raise ValueError(str(exc)) from exc
    tag = root.tag if isinstance(root.tag, str) else ""
    if tag in ("article", "pmc-articleset"):
        try:
            articles = parse_pmc_articles(data)
        except EutilsError as exc:
            raise ValueError(str(exc)) from exc
        if not articles:
            raise ValueError("JATS article without a PMC id (article-id pub-id-type pmc/pmcid)")
        return [
            DocumentFetched(
                document_id=document_id("pmc", a.pmcid),
                source="pmc",
                source_id=a.pmcid,
                format="jats-xml",
                content=a.xml.decode("utf-8"),
                job_id=job_id,
                **extra,
            )
            for a in articles
        ]
    if tag in ("book-part-wrapper", "book-part", "book"):
        source_id = bookshelf_source_id(root, name, accession)
        return [
            DocumentFetched(
                document_id=document_id("bookshelf", source_id),
                source="bookshelf",
                source_id=source_id,
                format="bookshelf-nxml",
                content=_decode_xml(data),
                job_id=job_id,
                **extra,
            )
        ]
    wanted = "article, pmc-articleset, book, book-part-wrapper or book-part"
    raise ValueError(f"unknown root element <{tag}> (want {wanted})")


def _decode_xml(data: bytes) -> str:
    """The text of an XML file, honouring its declared encoding (default UTF-8)."""
    head = data[:200]
    match = re.search(rb'encoding=["\']([A-Za-z0-9._-]+)["\']', head)
    encoding = match.group(1).decode("ascii") if match else "utf-8"
    try:
        text = data.decode(encoding)
    except (LookupError, UnicodeDecodeError):
        text = data.decode("utf-8", "replace")
    if match and encoding.lower() not in ("utf-8", "utf8"):
        text = text.replace(match.group(0).decode("ascii"), 'encoding="UTF-8"', 1)
    return text


def _open_maybe_gz(path: Path) -> IO[bytes]:
    fh = path.open("rb")
    if fh.read(2) == b"\x1f\x8b":
        fh.seek(0)
        return gzip.GzipFile(fileobj=fh)  # type: ignore[return-value]
    fh.seek(0)
    return fh


def _root_tag(path: Path) -> str:
    with _open_maybe_gz(path) as fh:
        try:
            for _, elem in etree.iterparse(
                fh, events=("start",), resolve_entities=False, no_network=True, load_dtd=False
            ):
                return str(elem.tag)
        except etree.XMLSyntaxError as exc:
            raise ValueError(f"not well-formed XML: {exc}") from exc
    raise ValueError("empty file")


def iter_xml_file(
    path: str | os.PathLike[str], *, job_id: str | None = None, trace_id: str | None = None
) -> Iterator[PubmedEvent]:
    """One XML file (plain or gzipped), whatever it holds: a PubMed set, a JATS article or Bookshelf NXML.

    Raises ValueError (or MalformedXmlError/OSError) when the file is unusable.
    """
    path = Path(path)
    if _root_tag(path) == "PubmedArticleSet":
        yield from iter_pubmed_file(path, job_id=job_id, trace_id=trace_id)
        return
    with _open_maybe_gz(path) as fh:
        data = fh.read()
    yield from xml_to_events(data, path.name, job_id=job_id, trace_id=trace_id)


def iter_xml_dir(
    directory: str | os.PathLike[str],
    *,
    job_id: str | None = None,
    trace_id: str | None = None,
    recursive: bool = True,
) -> Iterator[BulkItem]:
    """Every ``.xml``/``.nxml`` (optionally ``.gz``) file under ``directory``, in name order, as events."""
    base = Path(directory)
    if not base.is_dir():
        raise NotADirectoryError(str(base))
    pattern = "**/*" if recursive else "*"
    paths = [p for p in base.glob(pattern) if p.is_file() and p.name.lower().endswith(XML_SUFFIXES)]
    for path in sorted(paths):
        try:
            yield from iter_xml_file(path, job_id=job_id, trace_id=trace_id)
        except (ValueError, OSError, MalformedXmlError) as exc:
            yield BulkProblem(str(path.relative_to(base)), None, str(exc))


# ------------------------------------------------------------------------------------------ JSON lines


def _problem_text(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors()[:5]:
        where = ".".join(str(p) for p in err.get("loc", ())) or "(document)"
        parts.append(f"{where}: {err.get('msg', 'invalid')}")
    return "; ".join(parts)


def parse_document_line(line: str | bytes) -> ParsedDocument:
    """One JSON-lines record -> a ParsedDocument; ValueError with the reason if unusable."""
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON: {exc.msg} at column {exc.colno}") from exc
    if not isinstance(obj, dict):
        raise ValueError(f"expected a JSON object, got {type(obj).__name__}")
    try:
        doc = ParsedDocument.model_validate(obj)
    except ValidationError as exc:
        raise ValueError(_problem_text(exc)) from exc
    if not doc.source_id.strip():
        raise ValueError("source_id is empty")
    if not doc.title.strip():
        raise ValueError("title is missing or empty")
    return doc


def iter_jsonl(
    source: str | os.PathLike[str] | IO[bytes] | IO[str],
    *,
    job_id: str | None = None,
    trace_id: str | None = None,
) -> Iterator[DocumentFetched | BulkProblem]:
    """A JSON-lines document import (plain or gzipped) as events; bad lines as :class:`BulkProblem`."""
    if isinstance(source, str | os.PathLike):
        name = os.fspath(source)
        fh: IO[bytes] | IO[str] = _open_maybe_gz(Path(name))
        close = True
    else:
        name = getattr(source, "name", "<stream>")
        fh = source
        close = False
    try:
        lines: Iterator[bytes | str] = iter(fh)
        for number, raw in enumerate(lines, start=1):
            line = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
            if not line.strip():
                continue
            if len(line) > MAX_JSONL_LINE_BYTES:
                yield BulkProblem(str(name), number, f"line longer than {MAX_JSONL_LINE_BYTES} bytes")
                continue
            try:
                doc = parse_document_line(line)
            except ValueError as exc:
                yield BulkProblem(str(name), number, str(exc))
                continue
            yield document_event(doc, job_id=job_id, trace_id=trace_id)
    finally:
        if close:
            fh.close()
