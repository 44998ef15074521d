"""NCBI Bookshelf NXML (BITS: ``book-part-wrapper``, ``book`` or ``book-part``) to :class:`ParsedDocument`.

One document per book part (chapter, annex, appendix...). Front matter, reference lists and
acknowledgements are skipped: parts whose id starts with ``fm-``, ``rl-`` or ``ak-`` (the Bookshelf file
naming; :func:`services.parser.core.parse_file` also skips such file names), parts typed as
front matter / references / acknowledgements, and a ``<book>``'s ``front-matter`` and ``book-back``.

Sections carry their title path "Book > Chapter > Section > Subsection"; the part's own text (before its
first section) is the section "Book > Chapter", always first, so the hierarchy can be rebuilt from the
flat ``sections`` list and chunked hierarchically (:meth:`Chunker.chunk_guideline`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from lxml import etree

from services.parser.chunking import PATH_SEPARATOR, FullTextBuilder
from services.parser.jats import (
    XML_LANG,
    add_sections,
    affiliations_by_id,
    block_texts,
    container_blocks,
    contrib_authors,
    jats_date,
    language_code,
    local,
    squash,
    text_without,
)
from services.parser.pubmed import abstract_text
from shared.models import EVIDENCE_WEIGHTS, AbstractSection, Journal, ParsedDocument, StudyType
from shared.sources.bookshelf_parts import BookshelfParseError, book_id, document_parts, part_source_id
from shared.xmlsafe import parse_xml

GUIDELINE_WORDS = ("guideline", "recommendation", "standard treatment", "consensus")


@dataclass
class BookInfo:
    title: str = ""
    book_id: str | None = None
    publisher: str | None = None
    pub_date: str | None = None
    year: int | None = None
    language: str | None = None
    subjects: list[str] = field(default_factory=list)
    contrib_groups: list[etree._Element] = field(default_factory=list)


def _book_info(book_meta: etree._Element | None) -> BookInfo:
    if book_meta is None:
        return BookInfo()
    pub_date, year = jats_date(book_meta.find("pub-date"))
    return BookInfo(
        title=text_without(book_meta.find("book-title-group/book-title")),
        book_id=book_id(book_meta),
        publisher=squash(book_meta.findtext("publisher/publisher-name") or "") or None,
        pub_date=pub_date,
        year=year,
        language=book_meta.get(XML_LANG),
        subjects=[t for t in (text_without(s) for s in book_meta.findall(".//subject")) if t],
        contrib_groups=book_meta.findall("contrib-group"),
    )


def classify_book(book_title: str, chapter_title: str, publisher: str | None, subjects: list[str]) -> StudyType:
    """The study type of a Bookshelf part: ``guideline`` when its titles or subjects say so or the WHO
    publishes it, else ``review``."""
    text = " ".join([book_title, chapter_title, *subjects]).lower()
    if any(w in text for w in GUIDELINE_WORDS) or (publisher or "").lower().startswith("world health organization"):
        return "guideline"
    return "review"


def parse_part(part: etree._Element, book: BookInfo, root: etree._Element) -> ParsedDocument:
    """One ``book-part`` (its nested book parts are documents of their own)."""
    meta = part.find("book-part-meta")
    chapter = text_without(meta.find("title-group/title")) if meta is not None else ""
    chapter = chapter or (part.get("id") or "Chapter")
    path = [p for p in (book.title, chapter) if p]
    source_id = part_source_id(part, book.book_id)
    if source_id is None:
        raise BookshelfParseError(f"book part {chapter!r} has no id")
    builder = FullTextBuilder()
    body = part.find("body")
    own: list[str] = []
    if body is not None:
        own = [b for child in body if local(child) not in ("sec", "book-part") for b in block_texts(child)]
    builder.add(PATH_SEPARATOR.join(path), "\n\n".join(own), heading=chapter)
    abstract_sections: list[AbstractSection] = []
    ab = meta.find("abstract") if meta is not None else None
    if ab is not None:
        text = "\n\n".join(container_blocks(ab, include_secs=True))
        if text:
            abstract_sections.append(AbstractSection(label=None, text=text))
            builder.add(PATH_SEPARATOR.join([*path, "Summary"]), text)
    if body is not None:
        add_sections(builder, body, path)
    full_text, sections = builder.build()
    pub_date, year = jats_date(meta.find("pub-date")) if meta is not None else (None, None)
    if pub_date is None:
        pub_date, year = book.pub_date, book.year
    study_type = classify_book(book.title, chapter, book.publisher, book.subjects)
    contribs = (meta.findall("contrib-group") if meta is not None else []) or book.contrib_groups
    lang = part.get(XML_LANG) or root.get(XML_LANG) or book.language or "en"  # the BITS DTD default
    return ParsedDocument(
        source="bookshelf",
        source_id=source_id,
        title=chapter,
        abstract=abstract_text(abstract_sections),
        abstract_sections=abstract_sections,
        authors=contrib_authors(contribs, affiliations_by_id(root)),
        journal=Journal(title=book.title or None),
        pub_date=pub_date,
        year=year,
        language=language_code(lang),
        publication_types=list(book.subjects),
        study_type=study_type,
        evidence_level=EVIDENCE_WEIGHTS[study_type],
        full_text=full_text,
        sections=sections,
    )


def parse_bookshelf(content: bytes | str | etree._Element) -> list[ParsedDocument]:
    """Every (non-skipped) book part of a Bookshelf NXML document."""
    root = content if isinstance(content, etree._Element) else parse_xml(content)
    book_meta, parts = document_parts(root)
    book = _book_info(book_meta)
    return [parse_part(p, book, root) for p in parts]
