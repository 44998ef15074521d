"""PMC JATS (``<article>``, or a ``<pmc-articleset>`` of them) to :class:`ParsedDocument`.

Front matter as for PubMed (ids, title, authors with affiliations, journal, dates, keywords), the abstract
(structured abstracts keep their section titles as labels) and the body: sections recursively
(``sec``/``title``/``p``, lists, boxed text, quotes), tables as text (label, caption, one line a row),
figure captions. References, acknowledgements, competing-interest and author-contribution notes stay out
of ``full_text`` (hence out of the chunks); the PMIDs the references carry are kept in ``references``.
``full_text`` and ``sections`` follow the layout of :mod:`services.parser.chunking`.

The block-text helpers here are shared with the Bookshelf parser (BITS uses the same elements).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from lxml import etree

from services.parser.chunking import PATH_SEPARATOR, FullTextBuilder
from services.parser.evidence import classify_jats
from services.parser.pubmed import abstract_text, iso_date, month_number
from shared.models import AbstractSection, Author, Journal, ParsedDocument
from shared.xmlsafe import parse_xml

XML_LANG = "{http://www.w3.org/XML/1998/namespace}lang"

# ISO 639-1 (JATS xml:lang) to the ISO 639-2/B codes PubMed uses, for the common languages.
LANGUAGES = {
    "en": "eng", "fr": "fre", "de": "ger", "es": "spa", "it": "ita", "pt": "por", "nl": "dut", "ru": "rus",
    "zh": "chi", "ja": "jpn", "ko": "kor", "pl": "pol", "sv": "swe", "da": "dan", "no": "nor", "fi": "fin",
    "tr": "tur", "ar": "ara", "he": "heb", "el": "gre", "cs": "cze", "hu": "hun",
}  # fmt: skip

# Elements that are blocks of their own even when they sit inside a <p>.
BLOCKS_IN_P = frozenset(
    {"table-wrap", "table-wrap-group", "fig", "fig-group", "list", "boxed-text", "disp-quote", "def-list",
     "supplementary-material", "statement", "speech", "verse-group", "preformat", "code", "array"}
)  # fmt: skip
# Never text: media, graphics, references, footnote groups, processing metadata.
SKIPPED = frozenset(
    {"title", "label", "sec", "sec-meta", "ref-list", "fn-group", "supplementary-material", "graphic",
     "media", "inline-graphic", "object-id", "alternatives-graphic", "ack", "glossary", "notes", "app-group",
     "processing-meta", "permissions", "attrib"}
)  # fmt: skip
# Sections that are not content: acknowledgements, references, declarations.
_EXCLUDED_SEC = re.compile(
    r"^\s*(acknowledge?ments?|references?|bibliography|literature cited|competing interests?|"
    r"conflicts? of interests?|declarations? of (competing )?interests?|disclosures?|"
    r"authors?['’]? ?contributions?|contributors?|funding( sources?| information| statement)?|"
    r"financial (support|disclosures?))\s*\.?\s*$",
    re.I,
)
_EXCLUDED_SEC_TYPES = frozenset(
    {"ack", "acknowledgment", "acknowledgments", "acknowledgement", "acknowledgements", "references",
     "ref-list", "coi-statement", "COI-statement", "author-contributions", "funding", "funding-information",
     "supplementary-material"}
)  # fmt: skip
SUMMARY_ABSTRACTS = frozenset({"summary", "author-summary", "executive-summary", "plain-language-summary"})
_RETRACTION_LINKS = frozenset({"retraction-forward", "retracted-by", "retraction"})


class JatsParseError(ValueError):
    """The XML is not a JATS article Evidentia can identify."""


def local(el: etree._Element) -> str:
    """The local name of an element's tag (namespace dropped); empty for comments and processing instructions."""
    tag = el.tag
    if not isinstance(tag, str):
        return ""
    return tag.rsplit("}", 1)[-1]


def squash(text: str) -> str:
    """``text`` with every run of whitespace made one space, stripped."""
    return " ".join(text.split())


def text_without(el: etree._Element | None, skip: Iterable[str] = ()) -> str:
    """Text of ``el`` (tails kept), leaving out the subtrees named in ``skip``, whitespace collapsed."""
    if el is None:
        return ""
    skipped = set(skip)
    parts: list[str] = []

    def walk(node: etree._Element) -> None:
        if node.text:
            parts.append(node.text)
        for child in node:
            if local(child) not in skipped:
                walk(child)
            if child.tail:
                parts.append(child.tail)

    walk(el)
    return squash("".join(parts))


def _inline(p: etree._Element) -> tuple[str, list[etree._Element]]:
    """Text of a paragraph without its block children, and those block children in order."""
    parts: list[str] = []
    nested: list[etree._Element] = []

    def walk(node: etree._Element) -> None:
        if node.text:
            parts.append(node.text)
        for child in node:
            name = local(child)
            if name in BLOCKS_IN_P:
                nested.append(child)
                parts.append(" ")
            elif name not in ("graphic", "inline-graphic", "media"):
                walk(child)
            if child.tail:
                parts.append(child.tail)

    walk(p)
    return squash("".join(parts)), nested


def _labelled(label: str, text: str) -> str:
    if not label:
        return text
    if not text:
        return label
    return f"{label} {text}" if label[-1:] in ".:" else f"{label}. {text}"


def caption_text(el: etree._Element) -> str:
    """``Label. Caption title. Caption paragraphs.`` of a figure, table or box."""
    label = squash(el.findtext("label") or "")
    caption = el.find("caption")
    text = text_without(caption) if caption is not None else ""
    return _labelled(label, text)


def table_text(tw: etree._Element) -> str:
    """A table as text: its caption line, one line per row with cells joined by " | ", its footnotes."""
    lines = [caption_text(tw)]
    for table in tw.iter("table"):
        for tr in table.iter("tr"):
            cells = [text_without(c) for c in tr if local(c) in ("td", "th")]
            if any(cells):
                lines.append(" | ".join(cells))
    foot = tw.find("table-wrap-foot")
    if foot is not None:
        fns = foot.findall(".//fn")
        if fns:
            lines += [text_without(fn) for fn in fns]
        else:
            lines.append(text_without(foot))
    return "\n".join(line for line in lines if line)


def list_text(el: etree._Element, depth: int = 0) -> str:
    """A JATS ``<list>`` as text: its title, then one bulleted line per item (nested lists indented by ``depth``)."""
    lines: list[str] = []
    title = squash(el.findtext("title") or "")
    if title:
        lines.append(title)
    for item in el.findall("list-item"):
        label = squash(item.findtext("label") or "")
        bullet = f"{label} " if label else "- "
        first = True
        for child in item:
            name = local(child)
            if name == "label":
                continue
            if name == "list":
                lines.append(list_text(child, depth + 1))
                continue
            for text in block_texts(child):
                lines.append(("  " * depth) + (bullet if first else "  ") + text)
                first = False
        if first and (item.text or "").strip():
            lines.append(("  " * depth) + bullet + squash(item.text or ""))
    return "\n".join(lines)


def block_texts(el: etree._Element) -> list[str]:
    """Text blocks (paragraph-like, separated by blank lines in full_text) of one element."""
    name = local(el)
    if name in SKIPPED:
        return []
    if name == "p":
        text, nested = _inline(el)
        out = [text] if text else []
        for child in nested:
            out += block_texts(child)
        return out
    if name == "list":
        return [t for t in [list_text(el)] if t]
    if name == "table-wrap":
        return [t for t in [table_text(el)] if t]
    if name in ("fig", "chem-struct-wrap"):
        return [t for t in [caption_text(el)] if t]
    if name in ("table-wrap-group", "fig-group", "alternatives", "disp-quote", "statement", "speech",
                "verse-group", "body", "abstract", "trans-abstract"):  # fmt: skip
        return container_blocks(el, include_secs=True)
    if name == "boxed-text":
        label = caption_text(el)
        inner = container_blocks(el, include_secs=True)
        return ([label] if label else []) + inner
    if name == "def-list":
        rows = []
        for item in el.findall("def-item"):
            term = text_without(item.find("term"))
            definition = " ".join(text_without(d) for d in item.findall("def"))
            rows.append(f"{term}: {definition}" if term else definition)
        return ["\n".join(r for r in rows if r)] if rows else []
    if name == "sec":  # a section inside a box
        title = squash(el.findtext("title") or "")
        return ([title] if title else []) + container_blocks(el, include_secs=True)
    if name in ("caption",):
        return [t for t in [text_without(el)] if t]
    text = text_without(el, skip=("graphic", "inline-graphic", "media"))
    return [text] if text else []


def container_blocks(el: etree._Element, *, include_secs: bool = False) -> list[str]:
    """Blocks of a container (sec, body, box), its title/label excluded; sub-sections only if asked."""
    out: list[str] = []
    if el.text and el.text.strip():
        out.append(squash(el.text))
    for child in el:
        name = local(child)
        if (name == "sec" and include_secs) or name not in SKIPPED:
            out += block_texts(child)
        if child.tail and child.tail.strip():
            out.append(squash(child.tail))
    return [b for b in out if b]


def section_title(sec: etree._Element, default: str = "Section") -> str:
    """A section's title: its ``<title>``, else its ``<label>``, else its ``sec-type`` (else ``default``), readable."""
    title = text_without(sec.find("title"))
    if not title:
        title = squash(sec.findtext("label") or "")
    return title or (sec.get("sec-type") or default).replace("-", " ").replace("|", " ").capitalize()


def excluded_section(sec: etree._Element) -> bool:
    """Whether a section is left out of the text: acknowledgements, references, funding, competing interests,
    author contributions or supplementary material, by its ``sec-type`` or its title."""
    sec_type = (sec.get("sec-type") or "").strip()
    if sec_type in _EXCLUDED_SEC_TYPES or sec_type.lower() in _EXCLUDED_SEC_TYPES:
        return True
    return bool(_EXCLUDED_SEC.match(text_without(sec.find("title"))))


def add_sections(builder: FullTextBuilder, container: etree._Element, path: list[str]) -> None:
    """Add every (non-excluded) ``sec`` child of ``container``, recursively, in reading order."""
    for sec in container.findall("sec"):
        if excluded_section(sec):
            continue
        title_path = [*path, section_title(sec)]
        builder.add(PATH_SEPARATOR.join(title_path), "\n\n".join(container_blocks(sec)))
        add_sections(builder, sec, title_path)


def add_body(builder: FullTextBuilder, body: etree._Element, path: list[str], loose_title: str) -> None:
    """A body: runs of blocks outside any section become sections titled ``loose_title``; then its secs."""
    run: list[str] = []

    def flush() -> None:
        if run:
            builder.add(PATH_SEPARATOR.join([*path, loose_title]), "\n\n".join(run))
            run.clear()

    for child in body:
        name = local(child)
        if name == "sec":
            flush()
            if excluded_section(child):
                continue
            title_path = [*path, section_title(child)]
            builder.add(PATH_SEPARATOR.join(title_path), "\n\n".join(container_blocks(child)))
            add_sections(builder, child, title_path)
        elif name not in SKIPPED and name != "book-part":
            run += block_texts(child)
    flush()


# -- front matter ---------------------------------------------------------------------------------------


def _initials(given: str) -> str | None:
    letters = [p[0].upper() for p in re.split(r"[\s\-.]+", given) if p and p[0].isalpha()]
    return "".join(letters) or None


def affiliations_by_id(root: etree._Element) -> dict[str, str]:
    """The text of every ``<aff>`` with an ``id``, by that id (labels left out)."""
    out: dict[str, str] = {}
    for aff in root.iter("aff"):
        aff_id = aff.get("id")
        if aff_id:
            out[aff_id] = text_without(aff, skip=("label", "sup"))
    return out


def contrib_authors(containers: Iterable[etree._Element], affs: dict[str, str]) -> list[Author]:
    """Authors of ``contrib-group`` elements (people and collaborations), affiliations resolved."""
    authors: list[Author] = []
    for group in containers:
        group_affs = [text_without(a, skip=("label", "sup")) for a in group.findall("aff")]
        for contrib in group.findall("contrib"):
            if (contrib.get("contrib-type") or "author") != "author":
                continue
            affiliations: list[str] = []
            for xref in contrib.findall(".//xref"):
                if xref.get("ref-type") == "aff":
                    for rid in (xref.get("rid") or "").split():
                        if rid in affs and affs[rid] not in affiliations:
                            affiliations.append(affs[rid])
            affiliations += [text_without(a, skip=("label", "sup")) for a in contrib.findall("aff")]
            if not affiliations and len(group_affs) == 1:
                affiliations = group_affs
            name = contrib.find("name")
            if name is None:
                name = contrib.find("name-alternatives/name")
            collab = contrib.find("collab")
            if name is not None:
                surname = text_without(name.find("surname"))
                given_el = name.find("given-names")
                given = text_without(given_el)
                initials = given_el.get("initials") if given_el is not None else None
                authors.append(
                    Author(
                        last_name=surname or None,
                        fore_name=given or None,
                        initials=initials or _initials(given),
                        affiliations=affiliations,
                    )
                )
            elif collab is not None:
                authors.append(
                    Author(
                        collective_name=text_without(collab, skip=("contrib-group",)) or None,
                        affiliations=affiliations,
                    )
                )
            else:
                string_name = text_without(contrib.find("string-name"))
                if string_name:
                    authors.append(Author(last_name=string_name, affiliations=affiliations))
    return authors


_DATE_PREFERENCE = ("ppub", "collection", "epub-ppub", "epub", "pmc-release")


def jats_date(el: etree._Element | None) -> tuple[str | None, int | None]:
    """``(ISO date, year)`` of a JATS date element: as precise as it gives (year, month or season, day);
    ``(None, None)`` without a four-digit year."""
    if el is None:
        return None, None
    year_text = squash(el.findtext("year") or "")
    if not year_text[:4].isdigit():
        return None, None
    year = int(year_text[:4])
    month = month_number(el.findtext("month")) or month_number(el.findtext("season"))
    day_text = squash(el.findtext("day") or "")
    day = int(day_text) if day_text.isdigit() and month else None
    return iso_date(year, month, day), year


def publication_date(meta: etree._Element) -> tuple[str | None, int | None]:
    """The issue's publication date (print, else collection, else electronic), like PubMed's PubDate."""
    dates: dict[str, etree._Element] = {}
    for d in meta.findall("pub-date"):
        kind = d.get("pub-type")
        if kind is None and d.get("date-type") in ("pub", None):
            kind = "epub" if d.get("publication-format") == "electronic" else "ppub"
        if kind and kind not in dates:
            dates[kind] = d
    for kind in _DATE_PREFERENCE:
        if kind in dates:
            return jats_date(dates[kind])
    first = meta.find("pub-date")
    return jats_date(first)


def language_code(value: str | None) -> str | None:
    """PubMed's three-letter code for a JATS ``xml:lang`` (``en`` or ``en-US`` -> ``eng``); other values
    lower-cased as given; None for none."""
    if not value:
        return None
    value = value.strip().lower()
    return LANGUAGES.get(value.split("-")[0], value)


# -- article --------------------------------------------------------------------------------------------


def _abstracts(meta: etree._Element) -> tuple[list[AbstractSection], list[tuple[str, str]]]:
    """(sections of the main abstract, [(title, text)] of the summaries such as an author summary)."""
    main: list[AbstractSection] = []
    extra: list[tuple[str, str]] = []
    found_main = False
    for ab in meta.findall("abstract"):
        kind = (ab.get("abstract-type") or "").lower()
        if kind in ("", "abstract", "structured") and not found_main:
            found_main = True
            secs = ab.findall("sec")
            if secs:
                for sec in secs:
                    text = " ".join(container_blocks(sec, include_secs=True))
                    label = text_without(sec.find("title")).rstrip(":. ") or None
                    if text:
                        main.append(AbstractSection(label=label, text=text))
                loose = " ".join(b for child in ab if local(child) not in ("sec", "title") for b in block_texts(child))
                if loose:
                    main.insert(0, AbstractSection(label=None, text=loose))
            else:
                text = "\n\n".join(container_blocks(ab))
                if text:
                    main.append(AbstractSection(label=None, text=text))
        elif kind in SUMMARY_ABSTRACTS:
            title = text_without(ab.find("title")) or kind.replace("-", " ").capitalize()
            text = "\n\n".join(container_blocks(ab, include_secs=True))
            if text:
                extra.append((title, text))
    return main, extra


def parse_article(article: etree._Element) -> ParsedDocument:
    """The parsed document of one JATS ``<article>`` element (metadata, sections, full text, no chunks yet);
    raises :class:`JatsParseError` when it has no ``front/article-meta``."""
    meta = article.find("front/article-meta")
    if meta is None:
        raise JatsParseError("JATS article without front/article-meta")
    ids: dict[str, str] = {}
    for el in meta.findall("article-id"):
        kind = (el.get("pub-id-type") or "").lower()
        if kind and el.text and kind not in ids:
            ids[kind] = el.text.strip()
    pmc = ids.get("pmcid") or ids.get("pmc")
    pmcid = None if not pmc else (pmc if pmc.upper().startswith("PMC") else f"PMC{pmc}")
    pmid = ids.get("pmid")
    doi = ids.get("doi")
    if pmcid:
        source_id = pmcid
    elif pmid:
        source_id = f"PMID{pmid}"
    elif doi:
        source_id = f"doi:{doi}"
    else:
        raise JatsParseError("JATS article without a PMCID, PMID or DOI to identify it")
    title = text_without(meta.find("title-group/article-title"), skip=("xref", "fn"))
    journal_meta = article.find("front/journal-meta")
    journal = Journal()
    if journal_meta is not None:
        jt = journal_meta.find("journal-title-group/journal-title")
        if jt is None:
            jt = journal_meta.find("journal-title")
        iso = None
        for jid in journal_meta.findall("journal-id"):
            if jid.get("journal-id-type") == "iso-abbrev":
                iso = squash(jid.text or "")
        if not iso:
            for jid in journal_meta.findall("journal-id"):
                if jid.get("journal-id-type") == "nlm-ta":
                    iso = squash(jid.text or "")
        journal.title = text_without(jt) or None
        journal.iso_abbrev = iso or None
    journal.volume = squash(meta.findtext("volume") or "") or None
    journal.issue = squash(meta.findtext("issue") or "") or None
    fpage, lpage = squash(meta.findtext("fpage") or ""), squash(meta.findtext("lpage") or "")
    journal.pages = (f"{fpage}-{lpage}" if fpage and lpage and fpage != lpage else fpage) or (
        squash(meta.findtext("elocation-id") or "") or None
    )
    pub_date, year = publication_date(meta)
    subjects = [
        text_without(s) for s in meta.findall("article-categories//subj-group[@subj-group-type='heading']/subject")
    ]
    article_type = article.get("article-type")
    publication_types = [s for s in subjects if s] or ([article_type] if article_type else [])
    keywords = [k for k in (text_without(k) for k in meta.findall("kwd-group/kwd")) if k]
    study_type, level = classify_jats(article_type, title, [*subjects, *keywords])
    retracted = title.upper().startswith("RETRACTED") or any(
        (r.get("related-article-type") or "").lower() in _RETRACTION_LINKS for r in meta.findall("related-article")
    )
    if article_type in ("retraction", "correction"):
        retracted = False  # a notice is not itself retracted
    affs = affiliations_by_id(article.find("front") if article.find("front") is not None else article)
    authors = contrib_authors(meta.findall("contrib-group"), affs)
    abstract_sections, summaries = _abstracts(meta)

    builder = FullTextBuilder()
    abstract = abstract_text(abstract_sections)
    if abstract:
        builder.add("Abstract", abstract)
    for summary_title, text in summaries:
        builder.add(summary_title, text)
    body = article.find("body")
    if body is not None:
        add_body(builder, body, [], "Main text")
    floats = article.find("floats-group")
    if floats is not None:
        for el in floats:
            text = "\n\n".join(block_texts(el))
            if text:
                label = squash(el.findtext("label") or "") or ("Table" if local(el).startswith("table") else "Figure")
                builder.add(label, text)
    back = article.find("back")
    if back is not None:
        for app in back.findall("app-group/app") + back.findall("app"):
            app_title = section_title(app, "Appendix")
            builder.add(f"Appendix{PATH_SEPARATOR}{app_title}", "\n\n".join(container_blocks(app)))
            add_sections(builder, app, ["Appendix", app_title])
    full_text, sections = builder.build()
    if not sections and title:
        builder.add("Title", title)
        full_text, sections = builder.build()

    references: dict[str, None] = {}
    for ref_list in article.iter("ref-list"):
        for pid in ref_list.iter("pub-id"):
            if pid.get("pub-id-type") == "pmid" and (pid.text or "").strip():
                references.setdefault(pid.text.strip(), None)
    return ParsedDocument(
        source="pmc",
        source_id=source_id,
        pmid=pmid,
        pmcid=pmcid,
        doi=doi,
        title=title,
        abstract=abstract,
        abstract_sections=abstract_sections,
        authors=authors,
        journal=journal,
        pub_date=pub_date,
        year=year,
        language=language_code(article.get(XML_LANG, "en")),  # the JATS DTD's default is "en"
        publication_types=publication_types,
        study_type=study_type,
        evidence_level=level,
        keywords=keywords,
        retracted=retracted,
        full_text=full_text,
        sections=sections,
        references=list(references),
    )


def parse_jats(content: bytes | str | etree._Element) -> list[ParsedDocument]:
    """Every article of a JATS document (``<article>`` or ``<pmc-articleset>``)."""
    root = content if isinstance(content, etree._Element) else parse_xml(content)
    name = local(root)
    if name == "article":
        return [parse_article(root)]
    if name == "pmc-articleset":
        return [parse_article(a) for a in root.findall("article")]
    raise JatsParseError(f"not a JATS article: the root element is <{name}>")
