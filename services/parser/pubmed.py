"""PubMed XML (``PubmedArticle`` and ``PubmedBookArticle``) to :class:`ParsedDocument`.

The fields read: PMID, title, abstract with its structured sections (``Label`` and
``NlmCategory`` kept), authors (names, collective names, affiliations), journal, publication date
normalised to ISO 8601 (Year/Month/Day, ``Season`` and ``MedlineDate`` forms), publication types,
MeSH headings with qualifiers and major-topic flags, keywords, chemicals, DOI / PMCID / PII from
``ArticleIdList``, language, cited PMIDs and retraction status. ``full_text`` is the abstract (the
title when there is none), so an abstract-only record is chunked like any other document.
"""

from __future__ import annotations

import re

from lxml import etree

from services.parser.chunking import FullTextBuilder
from services.parser.evidence import classify_pubmed
from shared.models import AbstractSection, Author, Journal, MeshHeading, ParsedDocument, Section
from shared.xmlsafe import parse_xml

MONTHS = {
    m: i for i, m in enumerate(("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"), 1)
}
# A season is not a month; it is mapped to the month it starts (meteorological seasons) so dates sort.
SEASONS = {"spring": 3, "summer": 6, "fall": 9, "autumn": 9, "winter": 12}

RETRACTED_TYPES = {"retracted publication"}


class PubmedParseError(ValueError):
    """A PubMed record lacks what every record has (a PMID)."""


def text_of(el: etree._Element | None) -> str:
    """All text inside ``el`` (markup such as <i> or <sup> flattened), whitespace collapsed."""
    if el is None:
        return ""
    return " ".join("".join(el.itertext()).split())


def month_number(value: str | None) -> int | None:
    """A month (1-12) from a number, a month name or abbreviation, or a season; None when it is none of these."""
    if not value:
        return None
    v = value.strip().lower()
    if v.isdigit():
        n = int(v)
        return n if 1 <= n <= 12 else None
    return MONTHS.get(v[:3]) or SEASONS.get(v)


def iso_date(year: int | None, month: int | None = None, day: int | None = None) -> str | None:
    """``YYYY``, ``YYYY-MM`` or ``YYYY-MM-DD``: as precise as the parts allow."""
    if year is None:
        return None
    if month is None:
        return f"{year:04d}"
    if day is None or not 1 <= day <= 31:
        return f"{year:04d}-{month:02d}"
    return f"{year:04d}-{month:02d}-{day:02d}"


_MEDLINE_DATE = re.compile(r"(\d{4})(?:\s*[-/ ]?\s*([A-Za-z]+|\d{1,2})(?:\s+(\d{1,2})\b)?)?")


def parse_medline_date(value: str) -> tuple[int | None, int | None, int | None]:
    """The start of a free-text ``MedlineDate``: "1998 Dec-1999 Jan" -> 1998-12, "2000 Spring" -> 2000-03."""
    m = _MEDLINE_DATE.search(value)
    if m is None:
        return None, None, None
    year = int(m.group(1))
    month = month_number(m.group(2)) if m.group(2) and not m.group(2).isdigit() else None
    day = int(m.group(3)) if month and m.group(3) else None
    return year, month, day


def parse_date_element(el: etree._Element | None) -> tuple[str | None, int | None]:
    """(ISO date, year) of a ``PubDate`` / ``ArticleDate`` / ``BeginningDate`` element."""
    if el is None:
        return None, None
    year_text = (el.findtext("Year") or "").strip()
    if year_text.isdigit():
        year = int(year_text)
        month = month_number(el.findtext("Month")) or month_number(el.findtext("Season"))
        day_text = (el.findtext("Day") or "").strip()
        day = int(day_text) if day_text.isdigit() and month else None
        return iso_date(year, month, day), year
    medline = el.findtext("MedlineDate")
    if medline:
        y, mo, d = parse_medline_date(medline)
        return iso_date(y, mo, d), y
    return None, None


def _authors(author_list: etree._Element | None) -> list[Author]:
    out: list[Author] = []
    if author_list is None:
        return out
    for a in author_list.findall("Author"):
        if a.get("ValidYN") == "N":
            continue
        affiliations = [text_of(x) for x in a.findall("AffiliationInfo/Affiliation")]
        affiliations += [text_of(x) for x in a.findall("Affiliation")]
        out.append(
            Author(
                last_name=text_of(a.find("LastName")) or None,
                fore_name=text_of(a.find("ForeName")) or text_of(a.find("FirstName")) or None,
                initials=text_of(a.find("Initials")) or None,
                collective_name=text_of(a.find("CollectiveName")) or None,
                affiliations=[x for x in affiliations if x],
            )
        )
    return out


def _abstract(abstract: etree._Element | None) -> list[AbstractSection]:
    if abstract is None:
        return []
    sections = []
    for part in abstract.findall("AbstractText"):
        text = text_of(part)
        if text:
            sections.append(
                AbstractSection(label=part.get("Label") or None, category=part.get("NlmCategory") or None, text=text)
            )
    return sections


def abstract_text(sections: list[AbstractSection]) -> str | None:
    """The abstract as one string: labelled parts as "LABEL: text", parts separated by a blank line."""
    if not sections:
        return None
    return "\n\n".join(f"{s.label}: {s.text}" if s.label else s.text for s in sections)


def _mesh(citation: etree._Element) -> list[MeshHeading]:
    out = []
    for h in citation.findall("MeshHeadingList/MeshHeading"):
        d = h.find("DescriptorName")
        if d is None:
            continue
        qualifiers = h.findall("QualifierName")
        major = d.get("MajorTopicYN") == "Y" or any(q.get("MajorTopicYN") == "Y" for q in qualifiers)
        out.append(MeshHeading(descriptor=text_of(d), qualifiers=[text_of(q) for q in qualifiers], major=major))
    return out


def _ids(id_list: etree._Element | None) -> dict[str, str]:
    ids: dict[str, str] = {}
    if id_list is not None:
        for el in id_list.findall("ArticleId"):
            kind = (el.get("IdType") or "").lower()
            value = (el.text or "").strip()
            if kind and value and kind not in ids:
                ids[kind] = value
    return ids


def _references(pubmed_data: etree._Element | None, citation: etree._Element | None = None) -> list[str]:
    """Cited PMIDs: ``ReferenceList`` entries, then ``CommentsCorrections RefType="Cites"``."""
    seen: dict[str, None] = {}
    if citation is not None:
        for el in citation.findall("CommentsCorrectionsList/CommentsCorrections[@RefType='Cites']/PMID"):
            value = (el.text or "").strip()
            if value:
                seen.setdefault(value, None)
    if pubmed_data is None:
        return list(seen)
    for el in pubmed_data.findall("ReferenceList/Reference/ArticleIdList/ArticleId[@IdType='pubmed']"):
        value = (el.text or "").strip()
        if value:
            seen.setdefault(value, None)
    for el in pubmed_data.findall("ReferenceList/ReferenceList/Reference/ArticleIdList/ArticleId[@IdType='pubmed']"):
        value = (el.text or "").strip()
        if value:
            seen.setdefault(value, None)
    return list(seen)


def _pmcid(value: str | None) -> str | None:
    if not value:
        return None
    value = value.strip()
    return value if value.upper().startswith("PMC") else f"PMC{value}"


def _full_text(title: str, sections: list[AbstractSection]) -> tuple[str, list[Section]]:
    builder = FullTextBuilder()
    text = abstract_text(sections)
    if text:
        builder.add("Abstract", text)
    elif title:
        builder.add("Title", title)
    return builder.build()


def parse_article(el: etree._Element) -> ParsedDocument:
    """The parsed document of one ``PubmedArticle`` element (metadata and abstract, no chunks yet); raises
    :class:`PubmedParseError` without a ``MedlineCitation`` or a PMID."""
    citation = el.find("MedlineCitation")
    if citation is None:
        raise PubmedParseError("PubmedArticle without MedlineCitation")
    pmid = (citation.findtext("PMID") or "").strip()
    if not pmid:
        raise PubmedParseError("PubmedArticle without a PMID")
    article = citation.find("Article")
    if article is None:
        raise PubmedParseError(f"PMID {pmid}: no Article element")
    title = text_of(article.find("ArticleTitle")) or text_of(article.find("VernacularTitle"))
    journal_el = article.find("Journal")
    issue = journal_el.find("JournalIssue") if journal_el is not None else None
    pub_date, year = parse_date_element(issue.find("PubDate") if issue is not None else None)
    if pub_date is None:
        pub_date, year = parse_date_element(article.find("ArticleDate"))
    pages = text_of(article.find("Pagination/MedlinePgn"))
    if not pages:
        start, end = (
            text_of(article.find("Pagination/StartPage")),
            text_of(article.find("Pagination/EndPage")),
        )
        pages = f"{start}-{end}" if start and end else start
    journal = Journal(
        title=(text_of(journal_el.find("Title")) or None) if journal_el is not None else None,
        iso_abbrev=(text_of(journal_el.find("ISOAbbreviation")) or None) if journal_el is not None else None,
        volume=(text_of(issue.find("Volume")) or None) if issue is not None else None,
        issue=(text_of(issue.find("Issue")) or None) if issue is not None else None,
        pages=pages or None,
    )
    if journal.iso_abbrev is None:
        journal.iso_abbrev = text_of(citation.find("MedlineJournalInfo/MedlineTA")) or None
    pubmed_data = el.find("PubmedData")
    ids = _ids(pubmed_data.find("ArticleIdList") if pubmed_data is not None else None)
    doi = ids.get("doi")
    if doi is None:
        for loc in article.findall("ELocationID"):
            if loc.get("EIdType") == "doi" and loc.get("ValidYN", "Y") == "Y":
                doi = text_of(loc)
                break
    pii = ids.get("pii")
    if pii is None:
        for loc in article.findall("ELocationID"):
            if loc.get("EIdType") == "pii":
                pii = text_of(loc)
                break
    publication_types = [text_of(p) for p in article.findall("PublicationTypeList/PublicationType")]
    mesh = _mesh(citation)
    study_type, level = classify_pubmed(publication_types, [m.descriptor for m in mesh])
    retracted = any(p.lower() in RETRACTED_TYPES for p in publication_types) or any(
        c.get("RefType") == "RetractionIn" for c in citation.findall("CommentsCorrectionsList/CommentsCorrections")
    )
    sections = _abstract(article.find("Abstract"))
    full_text, secs = _full_text(title, sections)
    return ParsedDocument.model_validate(
        {
            "source": "pubmed",
            "source_id": pmid,
            "pmid": pmid,
            "pmcid": _pmcid(ids.get("pmc")),
            "doi": doi or None,
            "pii": pii or None,
            "title": title,
            "abstract": abstract_text(sections),
            "abstract_sections": sections,
            "authors": _authors(article.find("AuthorList")),
            "journal": journal,
            "pub_date": pub_date,
            "year": year,
            "language": text_of(article.find("Language")) or None,
            "publication_types": publication_types,
            "study_type": study_type,
            "evidence_level": level,
            "mesh": mesh,
            "keywords": [text_of(k) for k in citation.findall("KeywordList/Keyword") if text_of(k)],
            "chemicals": [text_of(c) for c in citation.findall("ChemicalList/Chemical/NameOfSubstance")],
            "retracted": retracted,
            "full_text": full_text,
            "sections": secs,
            "references": _references(pubmed_data, citation),
        }
    )


def parse_book_article(el: etree._Element) -> ParsedDocument:
    """One ``PubmedBookArticle`` element (the PubMed record of a Bookshelf book or chapter)."""
    doc = el.find("BookDocument")
    if doc is None:
        raise PubmedParseError("PubmedBookArticle without BookDocument")
    pmid = (doc.findtext("PMID") or "").strip()
    if not pmid:
        raise PubmedParseError("PubmedBookArticle without a PMID")
    book = doc.find("Book")
    book_title = text_of(book.find("BookTitle")) if book is not None else ""
    title = text_of(doc.find("ArticleTitle")) or text_of(doc.find("VernacularTitle")) or book_title
    pub_date, year = parse_date_element(book.find("PubDate") if book is not None else None)
    if pub_date is None and book is not None:
        pub_date, year = parse_date_element(book.find("BeginningDate"))
    ids = _ids(doc.find("ArticleIdList"))
    book_data = el.find("PubmedBookData")
    ids.update(
        {
            k: v
            for k, v in _ids(book_data.find("ArticleIdList") if book_data is not None else None).items()
            if k not in ids
        }
    )
    author_list = None
    for al in doc.findall("AuthorList"):
        if al.get("Type", "authors") == "authors":
            author_list = al
            break
    publication_types = [text_of(p) for p in doc.findall("PublicationType")]
    publication_types += [text_of(p) for p in doc.findall("PublicationTypeList/PublicationType")]
    study_type, level = classify_pubmed(publication_types)
    sections = _abstract(doc.find("Abstract"))
    full_text, secs = _full_text(title, sections)
    keywords = [text_of(k) for k in doc.findall("KeywordList/Keyword") if text_of(k)]
    return ParsedDocument.model_validate(
        {
            "source": "pubmed",
            "source_id": pmid,
            "pmid": pmid,
            "pmcid": _pmcid(ids.get("pmc")),
            "doi": ids.get("doi"),
            "title": title,
            "abstract": abstract_text(sections),
            "abstract_sections": sections,
            "authors": _authors(author_list),
            "journal": Journal(title=book_title or None),
            "pub_date": pub_date,
            "year": year,
            "language": text_of(doc.find("Language")) or None,
            "publication_types": publication_types,
            "study_type": study_type,
            "evidence_level": level,
            "keywords": keywords,
            "retracted": any(p.lower() in RETRACTED_TYPES for p in publication_types),
            "full_text": full_text,
            "sections": secs,
            "references": _references(book_data),
        }
    )


def parse_record(xml: bytes | str | etree._Element) -> ParsedDocument:
    """A ``PubmedArticle`` or ``PubmedBookArticle`` (raw XML or a parsed element)."""
    el = xml if isinstance(xml, etree._Element) else parse_xml(xml)
    if el.tag == "PubmedArticle":
        return parse_article(el)
    if el.tag == "PubmedBookArticle":
        return parse_book_article(el)
    raise PubmedParseError(f"not a PubMed record: <{el.tag}>")
