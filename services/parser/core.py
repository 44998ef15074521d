"""The one entry point the parser service and ``evidentia parse`` both call.

``parse_content(fmt, content, chunker=...)`` parses one document's bytes (a PubMed set may hold many
records) and returns :class:`ParsedDocument` objects with their chunks. ``parse_file(path)`` detects the
format from the content, gunzips, streams PubMed sets record by record, and also reads JSON lines of
documents (filling chunks when they come without). ``chunk_document`` chunks an imported document.

Every failure is a ``ValueError`` with a readable reason: :class:`ParseError` (defined here), or
``UnsafeXmlError`` / ``MalformedXmlError`` from :mod:`shared.xmlsafe` (both ValueErrors), or
``UnknownFormatError`` from detection. Nothing here imports Kafka or database code; the service maps
these errors to dead letters.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Literal

from lxml import etree
from pydantic import ValidationError

from services.parser.chunking import Chunker, default_chunker
from services.parser.clinicaltrials import parse_trial
from services.parser.detect import Format, detect_format, head_of
from services.parser.jats import parse_jats
from services.parser.nxml import parse_bookshelf
from services.parser.pubmed import parse_record
from shared.models import ParsedDocument
from shared.sources.bookshelf_parts import skipped_name
from shared.xmlsafe import (
    MAX_DOCUMENT_BYTES,
    MAX_PROLOG_BYTES,
    MalformedXmlError,
    iter_pubmed_records,
    parse_xml,
)

XmlFormat = Literal["pubmed-xml", "jats-xml", "bookshelf-nxml"]


class ParseError(ValueError):
    """A document cannot be parsed; the message says why (it becomes the dead letter's reason)."""


def chunk_document(doc: ParsedDocument, chunker: Chunker) -> ParsedDocument:
    """A copy of ``doc`` with its chunks made from ``full_text`` and ``sections``.

    A document without ``full_text`` (an import that has only a title and an abstract) is first given
    the layout the PubMed parser uses: an "Abstract" section (or "Title" when there is no abstract).
    """
    if not doc.full_text or not doc.sections:
        from services.parser.chunking import FullTextBuilder

        builder = FullTextBuilder()
        if doc.abstract:
            builder.add("Abstract", doc.abstract)
        elif doc.title:
            builder.add("Title", doc.title)
        full_text, sections = builder.build()
        doc = doc.model_copy(update={"full_text": full_text or None, "sections": sections})
    _check_sections(doc)
    return doc.model_copy(update={"chunks": chunker.chunk(doc)})


def _check_sections(doc: ParsedDocument) -> None:
    length = len(doc.full_text or "")
    for sec in doc.sections:
        if not 0 <= sec.char_start <= sec.char_end <= length:
            raise ParseError(
                f"{doc.document_id}: section {sec.title!r} [{sec.char_start}, {sec.char_end}) "
                f"lies outside full_text ({length} characters)"
            )


def _parse_pubmed(content: bytes | str) -> list[ParsedDocument]:
    raw = content.encode("utf-8") if isinstance(content, str) else content
    return [parse_record(rec.xml) for rec in iter_pubmed_records(raw) if rec.kind != "delete"]


def _parse_jats(content: bytes | str) -> list[ParsedDocument]:
    return parse_jats(parse_xml(content))


def _parse_bookshelf(content: bytes | str) -> list[ParsedDocument]:
    return parse_bookshelf(parse_xml(content))


#: The parser of each fetched format (a ``DocumentFetched.format``): one document's bytes -> its documents,
#: unchunked. A source with a format of its own adds its parser module and one entry here.
PARSERS: dict[str, Callable[[bytes | str], list[ParsedDocument]]] = {
    "pubmed-xml": _parse_pubmed,
    "jats-xml": _parse_jats,
    "bookshelf-nxml": _parse_bookshelf,
    "clinicaltrials-json": parse_trial,
}
FORMATS: tuple[str, ...] = tuple(PARSERS)


def parse_content(fmt: str, content: bytes | str, *, chunker: Chunker) -> list[ParsedDocument]:
    """Parse one document of a known format (plain or gzipped bytes) into chunked documents.

    A PubMed set gives one document per ``PubmedArticle`` / ``PubmedBookArticle`` (``DeleteCitation``
    records are ignored here); a ``pmc-articleset`` one per article; Bookshelf NXML one per book part,
    front matter, reference lists and acknowledgements left out; any other format what its parser in
    :data:`PARSERS` makes of it.
    """
    parse = PARSERS.get(fmt)
    if parse is None:
        raise ParseError(f"unknown format {fmt!r}; expected one of {', '.join(FORMATS)}")
    try:
        docs = parse(content)
        return [chunk_document(d, chunker) for d in docs]
    except ValueError:
        raise
    except (etree.LxmlError, ValidationError, KeyError, AttributeError, TypeError) as exc:
        raise ParseError(f"cannot parse {fmt}: {type(exc).__name__}: {exc}") from exc


def _open(path: Path) -> IO[bytes]:
    fh: IO[bytes] = path.open("rb")
    if fh.read(2) == b"\x1f\x8b":
        fh.seek(0)
        return gzip.GzipFile(fileobj=fh, mode="rb")  # type: ignore[return-value]
    fh.seek(0)
    return fh


def _read_all(fh: IO[bytes]) -> bytes:
    try:
        data = fh.read(MAX_DOCUMENT_BYTES + 1)
    except (EOFError, OSError, zlib.error) as exc:
        raise MalformedXmlError(f"broken or truncated gzip data: {exc}") from exc
    if len(data) > MAX_DOCUMENT_BYTES:
        raise ParseError(f"document is over {MAX_DOCUMENT_BYTES} bytes")
    return data


def _iter_jsonl(fh: IO[bytes], chunker: Chunker, name: str) -> Iterator[ParsedDocument]:
    for number, line in enumerate(io.TextIOWrapper(fh, encoding="utf-8"), 1):
        if not line.strip():
            continue
        try:
            doc = ParsedDocument.model_validate(json.loads(line))
        except (json.JSONDecodeError, ValidationError) as exc:
            reason = str(exc).splitlines()[0] if isinstance(exc, ValidationError) else str(exc)
            raise ParseError(f"{name} line {number}: not a document: {reason}") from exc
        yield doc if doc.chunks else chunk_document(doc, chunker)


def detect_file(path: str | os.PathLike[str]) -> Format:
    """The format of a file (plain or gzipped) from its first bytes."""
    with Path(path).open("rb") as fh:
        head = fh.read(MAX_PROLOG_BYTES)
    return detect_format(head_of(head) if head[:2] == b"\x1f\x8b" else head)


def parse_file(path: str | os.PathLike[str], *, chunker: Chunker | None = None) -> Iterator[ParsedDocument]:
    """Every document of a file: PubMed XML (streamed), JATS, Bookshelf NXML or JSON lines; plain or gz.

    The format comes from the content. A Bookshelf file named ``fm-*``, ``rl-*`` or ``ak-*`` (front
    matter, reference list, acknowledgements) yields nothing. Raises a ValueError subclass with the reason
    for a file it cannot parse (documents before a break in a PubMed set have been yielded).
    """
    p = Path(path)
    if not p.is_file():
        raise ParseError(f"{p}: no such file")
    chunker = chunker if chunker is not None else default_chunker()
    fmt = detect_file(p)
    if fmt == "bookshelf-nxml" and skipped_name(p.name):
        return
    if fmt == "pubmed-xml":
        for rec in iter_pubmed_records(str(p)):
            if rec.kind == "delete":
                continue
            try:
                yield chunk_document(parse_record(rec.xml), chunker)
            except ValueError:
                raise
            except (etree.LxmlError, ValidationError) as exc:
                raise ParseError(f"PMID {rec.pmids[0]}: {exc}") from exc
        return
    with _open(p) as fh:
        if fmt == "jsonl":
            yield from _iter_jsonl(fh, chunker, p.name)
            return
        data = _read_all(fh)
    yield from parse_content(fmt, data, chunker=chunker)
