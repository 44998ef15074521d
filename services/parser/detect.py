"""Which parser a file needs, decided from its content (never its name).

``detect_format(head)`` looks at the first bytes (gunzipped if gzip): JSON lines start with ``{``;
XML is told apart by its root element (after the XML declaration, comments and DOCTYPE):
``PubmedArticleSet`` / ``PubmedArticle`` / ``PubmedBookArticle`` are PubMed XML, ``article`` /
``pmc-articleset`` are PMC JATS, ``book-part-wrapper`` / ``book`` / ``book-part`` are Bookshelf NXML.
Anything else is refused with the reason (a PNG, a PDF, HTML, an unknown XML root...).
"""

from __future__ import annotations

import gzip
import io
import zlib
from typing import Literal

from shared.xmlsafe import MAX_PROLOG_BYTES, MalformedXmlError, check_prolog

Format = Literal["pubmed-xml", "jats-xml", "bookshelf-nxml", "jsonl"]
XmlFormat = Literal["pubmed-xml", "jats-xml", "bookshelf-nxml"]

ROOTS: dict[str, XmlFormat] = {
    "PubmedArticleSet": "pubmed-xml",
    "PubmedArticle": "pubmed-xml",
    "PubmedBookArticle": "pubmed-xml",
    "article": "jats-xml",
    "pmc-articleset": "jats-xml",
    "book-part-wrapper": "bookshelf-nxml",
    "book": "bookshelf-nxml",
    "book-part": "bookshelf-nxml",
}

_MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"\x89PNG", "a PNG image"),
    (b"%PDF", "a PDF document"),
    (b"\xff\xd8\xff", "a JPEG image"),
    (b"GIF8", "a GIF image"),
    (b"PK\x03\x04", "a ZIP archive"),
    (b"BZh", "a bzip2 archive"),
    (b"\xfd7zXZ", "an xz archive"),
)


class UnknownFormatError(ValueError):
    """The content is none of the formats Evidentia parses."""


def head_of(data: bytes, size: int = MAX_PROLOG_BYTES) -> bytes:
    """The first ``size`` bytes of ``data``, gunzipped if it is gzip (reading only what is needed)."""
    if data[:2] == b"\x1f\x8b":
        try:
            with gzip.GzipFile(fileobj=io.BytesIO(data)) as fh:
                return fh.read(size)
        except (EOFError, OSError, zlib.error) as exc:
            raise MalformedXmlError(f"broken or truncated gzip data: {exc}") from exc
    return data[:size]


def detect_format(head: bytes | str) -> Format:
    """The format of a document from its first bytes (already gunzipped)."""
    raw = head.encode("utf-8") if isinstance(head, str) else head
    if raw[:2] == b"\x1f\x8b":
        raw = head_of(raw)
    for magic, what in _MAGIC:
        if raw.startswith(magic):
            raise UnknownFormatError(f"unsupported format: the content is {what}, not XML or JSON lines")
    stripped = raw.lstrip(b"\xef\xbb\xbf \t\r\n")
    if not stripped:
        raise UnknownFormatError("empty document")
    if stripped[:1] == b"{":
        return "jsonl"
    if stripped[:1] == b"[":
        raise UnknownFormatError("unsupported format: a JSON array; give one JSON document per line (JSON lines)")
    if stripped[:1] != b"<" and not raw.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise UnknownFormatError("unsupported format: neither XML nor JSON lines")
    root = check_prolog(raw)  # refuses internal DTDs (XXE, billion laughs) before anything else
    if root is None:
        raise UnknownFormatError("unsupported format: no XML root element found in the first bytes")
    if root.lower() == "html":
        raise UnknownFormatError("unsupported format: an HTML page, not NCBI XML")
    fmt = ROOTS.get(root)
    if fmt is None:
        known = ", ".join(sorted(ROOTS))
        raise UnknownFormatError(f"unsupported XML: the root element is <{root}>; expected one of {known}")
    return fmt
