"""Which parts of an NCBI Bookshelf NXML file (BITS) are documents, and the id of each.

One owner for this rule: the fetcher counts a file's documents for its ingestion job, and the parser turns the
same parts into documents. Front matter, reference lists and acknowledgements are skipped: parts whose id starts
with ``fm-``, ``rl-`` or ``ak-`` (the Bookshelf file naming) and parts typed as such.
"""

from __future__ import annotations

from collections.abc import Iterator

from lxml import etree

from shared.xmlsafe import parse_xml

SKIPPED_PREFIXES = ("fm-", "rl-", "ak-")
SKIPPED_PART_TYPES = frozenset(
    {"front-matter", "frontmatter", "reference-list", "references", "ref-list", "acknowledgments",
     "acknowledgements", "acknowledgment", "acknowledgement"}
)  # fmt: skip


class BookshelfParseError(ValueError):
    """The XML is not Bookshelf NXML Evidentia can use."""


def _squash(text: str) -> str:
    return " ".join(text.split())


def _local(el: etree._Element) -> str:
    return etree.QName(el).localname if isinstance(el.tag, str) else ""


def skipped_name(name: str) -> bool:
    """True for a Bookshelf part or file name that is front matter, a reference list or acknowledgements."""
    base = name.rsplit("/", 1)[-1].lower()
    return base.startswith(SKIPPED_PREFIXES)


def skipped_part(part: etree._Element) -> bool:
    """True for a ``book-part`` that is not a document of its own (front matter, references, acknowledgements)."""
    part_id = part.get("id") or ""
    kind = (part.get("book-part-type") or "").lower()
    return skipped_name(part_id) or kind in SKIPPED_PART_TYPES


def book_id(book_meta: etree._Element | None) -> str | None:
    """The book's accession (``NBK...``), else its first ``book-id``."""
    if book_meta is None:
        return None
    found = None
    for bid in book_meta.findall("book-id"):
        kind = (bid.get("book-id-type") or bid.get("pub-id-type") or "").lower()
        if kind == "accession" or found is None:
            found = _squash(bid.text or "") or found
    return found


def part_accession(part: etree._Element) -> str | None:
    meta = part.find("book-part-meta")
    if meta is not None:
        for pid in meta.findall("book-part-id"):
            if (pid.get("book-part-id-type") or pid.get("pub-id-type") or "").lower() == "accession":
                return _squash(pid.text or "") or None
    return None


def part_source_id(part: etree._Element, of_book: str | None) -> str | None:
    """A part's document id: its accession, else ``<book id>_<part id>``, else whichever of the two exists."""
    accession = part_accession(part)
    part_id = part.get("id")
    if accession:
        return accession
    if of_book and part_id:
        return f"{of_book}_{part_id}"
    if part_id or of_book:
        return str(part_id or of_book)
    return None


def _parts(container: etree._Element) -> Iterator[etree._Element]:
    """Book parts in reading order, nested ones after their parent, skipped ones left out."""
    for part in container.findall("book-part"):
        if skipped_part(part):
            continue
        yield part
        body = part.find("body")
        if body is not None:
            yield from _parts(body)


def document_parts(root: etree._Element) -> tuple[etree._Element | None, list[etree._Element]]:
    """The ``book-meta`` (if any) and every part that is a document, for a ``book-part-wrapper``, ``book`` or
    ``book-part`` root; :class:`BookshelfParseError` for any other root."""
    name = _local(root)
    if name == "book-part-wrapper":
        return root.find("book-meta"), list(_parts(root))
    if name == "book":
        body = root.find("book-body")
        return root.find("book-meta"), list(_parts(body)) if body is not None else []
    if name == "book-part":
        body = root.find("body")
        return None, [] if skipped_part(root) else [root, *(_parts(body) if body is not None else [])]
    raise BookshelfParseError(f"not Bookshelf NXML: the root element is <{name}>")


def source_ids(content: bytes | str) -> list[str]:
    """The source ids of the documents a Bookshelf file holds, in reading order (raises for a part without one)."""
    book_meta, parts = document_parts(parse_xml(content))
    of_book = book_id(book_meta)
    ids = []
    for part in parts:
        sid = part_source_id(part, of_book)
        if sid is None:
            raise BookshelfParseError(f"book part {part.get('id')!r} has no id")
        ids.append(sid)
    return ids
