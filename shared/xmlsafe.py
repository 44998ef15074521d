"""Safe XML handling for everything that reads NCBI XML.

Entity resolution, DTD loading and network access are off, and huge trees are refused, so an XXE
or billion-laughs file fails with a readable error instead of leaking files or eating memory.
``iter_pubmed_records`` streams a PubMed set (efetch output or a baseline/update file, plain or
gzipped) in bounded memory and yields one raw record at a time.
"""

from __future__ import annotations

import gzip
import io
import re
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Literal

from lxml import etree

MAX_DOCUMENT_BYTES = 64 * 1024 * 1024
MAX_PROLOG_BYTES = 1024 * 1024


class UnsafeXmlError(ValueError):
    """The XML declares entities or a DTD that we refuse to expand."""


class MalformedXmlError(ValueError):
    """The XML is truncated or not well-formed."""


def safe_parser() -> etree.XMLParser:
    return etree.XMLParser(
        resolve_entities=False,
        no_network=True,
        load_dtd=False,
        dtd_validation=False,
        huge_tree=False,
        remove_comments=True,
        remove_pis=True,
    )


def maybe_gunzip(data: bytes) -> bytes:
    """Gunzip ``data`` when it is gzip (refusing more than MAX_DOCUMENT_BYTES out: no gzip bombs)."""
    if data[:2] == b"\x1f\x8b":
        try:
            with gzip.GzipFile(fileobj=io.BytesIO(data)) as fh:
                out = fh.read(MAX_DOCUMENT_BYTES + 1)
        except (EOFError, OSError, zlib.error) as exc:
            raise MalformedXmlError(f"broken or truncated gzip data: {exc}") from exc
        if len(out) > MAX_DOCUMENT_BYTES:
            raise ValueError(f"decompressed document is over {MAX_DOCUMENT_BYTES} bytes")
        return out
    return data


_PROLOG_SKIP = re.compile(rb"\s+|<\?.*?\?>|<!--.*?-->", re.S)
_DOCTYPE = re.compile(rb"<!DOCTYPE\s+([^\s\[>]+)[^\[>]*(\[(.*?)\]\s*)?>", re.S)
_ROOT = re.compile(rb"<([A-Za-z_][\w.:-]*)(?=[\s/>])")


def check_prolog(head: bytes) -> str | None:
    """Check what comes before the root element; return the root's tag name (``None`` if not seen).

    Refuses (UnsafeXmlError) an internal DTD subset that declares entities, elements or attributes:
    that is how XXE and billion-laughs files work, and no NCBI file needs one. An external DTD
    reference (every NCBI file has one) is fine: it is never loaded.
    """
    if head.startswith((b"\xff\xfe", b"\xfe\xff")):
        head = head.decode("utf-16", errors="replace").encode("utf-8")
    elif head.startswith(b"\xef\xbb\xbf"):
        head = head[3:]
    pos = 0
    while True:
        m = _PROLOG_SKIP.match(head, pos)
        if m is None or m.end() == pos:
            break
        pos = m.end()
    if head.startswith(b"<!DOCTYPE", pos):
        m = _DOCTYPE.match(head, pos)
        if m is None:
            subset = head[pos:]
            if b"<!ENTITY" in subset or b"<!ELEMENT" in subset or b"<!ATTLIST" in subset:
                raise UnsafeXmlError("XML declares entities in an internal DTD (XXE / entity expansion); refused")
            if len(head) >= MAX_PROLOG_BYTES:
                raise MalformedXmlError("the DOCTYPE declaration is too long or never ends")
            return None
        subset = m.group(3) or b""
        if b"<!ENTITY" in subset:
            raise UnsafeXmlError("XML declares entities in an internal DTD (XXE / entity expansion); refused")
        if b"<!ELEMENT" in subset or b"<!ATTLIST" in subset:
            raise UnsafeXmlError("XML declares its own elements in an internal DTD; refused")
        pos = m.end()
        while True:
            m2 = _PROLOG_SKIP.match(head, pos)
            if m2 is None or m2.end() == pos:
                break
            pos = m2.end()
    root = _ROOT.match(head, pos)
    return root.group(1).decode("ascii", errors="replace") if root else None


def _check_doctype(tree: etree._ElementTree) -> None:
    dtd = tree.docinfo.internalDTD
    if dtd is not None and (list(dtd.iterentities()) or list(dtd.elements())):
        raise UnsafeXmlError("XML declares its own entities or elements in an internal DTD; refused")


def parse_xml(data: bytes | str) -> etree._Element:
    """Parse one XML document safely; raise UnsafeXmlError / MalformedXmlError with the reason."""
    raw = _str_to_bytes(data) if isinstance(data, str) else maybe_gunzip(data)
    if len(raw) > MAX_DOCUMENT_BYTES:
        raise ValueError(f"document is over {MAX_DOCUMENT_BYTES} bytes")
    if not raw.strip():
        raise MalformedXmlError("empty document")
    check_prolog(raw[:MAX_PROLOG_BYTES])
    try:
        root = etree.fromstring(raw, parser=safe_parser())
    except etree.XMLSyntaxError as exc:
        raise MalformedXmlError(f"not well-formed XML: {exc}") from exc
    _check_doctype(root.getroottree())
    _refuse_entity_refs(root)
    return root


_ENCODING_DECL = re.compile(r"^(\ufeff?\s*<\?xml[^>]*?)\s+encoding=([\"'])[^\"']*\2", re.S)


def _str_to_bytes(text: str) -> bytes:
    """UTF-8 bytes of an XML string, its encoding declaration (now wrong) removed."""
    return _ENCODING_DECL.sub(r"\1", text, count=1).encode("utf-8")


def _refuse_entity_refs(root: etree._Element) -> None:
    for node in root.iter(etree.Entity):
        raise UnsafeXmlError(f"unexpanded entity reference {node.text!r}; entity expansion is disabled")


@dataclass(frozen=True)
class PubmedRecord:
    """One record of a PubMed set: an article (raw XML of the element) or a deletion."""

    kind: Literal["article", "book-article", "delete"]
    pmids: tuple[str, ...]
    xml: bytes


def _open(source: str | bytes | IO[bytes]) -> IO[bytes]:
    if isinstance(source, bytes):
        return io.BytesIO(maybe_gunzip(source))
    if isinstance(source, str):
        fh: IO[bytes] = open(source, "rb")  # noqa: SIM115 - returned to the caller
        head = fh.read(2)
        fh.seek(0)
        return gzip.GzipFile(fileobj=fh) if head == b"\x1f\x8b" else fh  # type: ignore[return-value]
    return source


class _Replay:
    """A reader that gives back ``head`` first, then the rest of ``fh`` (for iterparse)."""

    def __init__(self, head: bytes, fh: IO[bytes]) -> None:
        self._head = head
        self._fh = fh

    def read(self, n: int = -1) -> bytes:
        if self._head:
            if n < 0 or n >= len(self._head):
                out, self._head = self._head, b""
                return out + (self._fh.read(n - len(out)) if n >= 0 else self._fh.read())
            out, self._head = self._head[:n], self._head[n:]
            return out
        return self._fh.read(n)


PUBMED_ROOTS = ("PubmedArticleSet", "PubmedArticle", "PubmedBookArticle", "DeleteCitation")


def _read_head(fh: IO[bytes]) -> bytes:
    head = b""
    while len(head) < MAX_PROLOG_BYTES:
        block = fh.read(65536)
        if not block:
            break
        head += block
        if check_prolog(head) is not None:
            break
    return head


def iter_pubmed_records(source: str | bytes | IO[bytes]) -> Iterator[PubmedRecord]:
    """Stream ``PubmedArticle`` / ``PubmedBookArticle`` / ``DeleteCitation`` records in bounded memory.

    Raises UnsafeXmlError for a file with an internal DTD, MalformedXmlError for a truncated or
    broken file (records before the break have been yielded), for an empty file and for XML whose
    root is not a PubMed set.
    """
    fh = _open(source)
    try:
        try:
            head = _read_head(fh)
        except (EOFError, OSError, zlib.error) as exc:
            raise MalformedXmlError(f"broken or truncated gzip data: {exc}") from exc
        if not head.strip():
            raise MalformedXmlError("empty document")
        root = check_prolog(head)
        if root is None:
            raise MalformedXmlError("not XML: no root element found")
        if root not in PUBMED_ROOTS:
            raise MalformedXmlError(f"not a PubMed XML set: the root element is <{root}>")
        yield from _iter_records(_Replay(head, fh))
    finally:
        if isinstance(source, str):
            fh.close()


def _iter_records(fh: _Replay) -> Iterator[PubmedRecord]:
    tags = ("PubmedArticle", "PubmedBookArticle", "DeleteCitation")
    context = etree.iterparse(
        fh,  # type: ignore[arg-type]
        events=("end",),
        tag=tags,
        resolve_entities=False,
        no_network=True,
        load_dtd=False,
        huge_tree=False,
        remove_comments=True,
        remove_pis=True,
    )
    try:
        for _, elem in context:
            if elem.tag == "DeleteCitation":
                pmids = tuple((p.text or "").strip() for p in elem.findall("PMID"))
                yield PubmedRecord("delete", pmids, etree.tostring(elem))
            else:
                pmid = elem.findtext(".//PMID") or ""
                kind: Literal["article", "book-article"] = "article" if elem.tag == "PubmedArticle" else "book-article"
                yield PubmedRecord(kind, (pmid.strip(),), etree.tostring(elem))
            elem.clear()
            parent = elem.getparent()
            while parent is not None and elem.getprevious() is not None:
                del parent[0]
    except etree.XMLSyntaxError as exc:
        raise MalformedXmlError(f"not well-formed XML: {exc}") from exc
    except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
        raise MalformedXmlError(f"broken or truncated gzip data: {exc}") from exc
