"""Citation handling, one owner for every channel: find the ids a text cites, keep only those among its sources,
number them, and gate streamed text the same way.

Answers are asked to cite inline as ``[PMID:12345678]``, ``[PMCID:PMC123]`` or ``[NBK:NBK1116]``, several ids in
one bracket (``[PMID:1, PMID:2]``). A model (or a forged passage) may write them any other way, so every form a
reader would take for a citation is recognised and checked alike:

- bracketed or parenthesised groups, any case, any separator: ``[pmid:123]``, ``[PMID 123]``, ``(PMID: 123)``,
  ``[PMID:123, 4]`` (a bare number after a kinded id has its kind), ``[PMID:1; PMCID:PMC2 and NBK3]``;
- bracketed bare PMIDs (five digits or more): ``[12345678]``, ``[12345678, 23456789]``;
- unbracketed ids in prose: ``PMID 123``, ``PMID: 123``, ``PMCID PMC123``, and the self-identifying ``PMC123`` and
  ``NBK123``;
- links to a record: ``https://pubmed.ncbi.nlm.nih.gov/123/``, ``.../pmc/articles/PMC123``, ``.../books/NBK123``.

The kinds, their id forms and the record links come from the source registry (:mod:`shared.sources`): a
source's rule names its citation kind, its self-identifying id prefix and its link patterns, and the patterns
here are built from those. A bare number is a PMID (PubMed, the first source of the registry).

Ids among the sources are rewritten to the canonical ``[KIND:value]`` form (links stay links); the rest are
removed, with the blank before them, and reported in :class:`CitationCheck`. :class:`StreamGate` applies the same
rule to text arriving piece by piece: it releases text as soon as no citation can still be forming at its end,
holding back an open bracket until it closes and the last word until the next one starts.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass

from shared.events import Citation, CitationCheck, EvidenceSummary, SynthesisReply, UnsupportedClaim
from shared.models import SearchHit, evidence_weight_of
from shared.sources import SOURCES, rule_by_kind
from shared.sources.pubmed import PUBMED
from shared.text import SENTENCE_BREAK, split_sentences

KINDS = tuple(rule.citation_kind for rule in SOURCES.values())
INSUFFICIENT = (
    "The retrieved evidence is insufficient to answer this question: no stored source is relevant enough. "
    "Try rephrasing, widening the filters, or ingesting more literature on the topic."
)
"""What an answer says when no source supports one (the synthesizer's, the agent's and a workflow's)."""

_PREFIXED = [rule for rule in SOURCES.values() if rule.id_prefix]
# Sources whose ids are numbers take any number after any of their kinds (a model writing [PMID:NBK1] means the
# Bookshelf id, read by its prefix); a source with an id shape of its own (an NCT number, a set id) is
# recognised after its own kind only, so that "FDA 2019" in prose is no citation.
_NUMERIC = [rule for rule in SOURCES.values() if rule.numeric]
_OWN = [rule for rule in SOURCES.values() if not rule.numeric]
# Longest first, so that no kind is taken for the start of another.
_KIND = "(?:" + "|".join(sorted((k.lower() for k in KINDS), key=len, reverse=True)) + ")"
_NUMERIC_KIND = "(?:" + "|".join(sorted((r.citation_kind.lower() for r in _NUMERIC), key=len, reverse=True)) + ")"
_SEP = r"[ \t]*[:#=]?[ \t]*"
_DIGITS_VALUE = r"(?:" + "|".join(re.escape(r.id_prefix.lower()) for r in _PREFIXED) + r")?\d+"
# Ids of a shape of their own without a prefix (set ids) first: they may begin with digits.
_VALUE = "(?:" + "".join(f"{r.id_pattern}|" for r in _OWN if not r.id_prefix) + _DIGITS_VALUE + ")"
_KINDED = (
    "(?:"
    + "|".join(
        [
            rf"{_NUMERIC_KIND}{_SEP}{_DIGITS_VALUE}",
            *(rf"{r.citation_kind.lower()}{_SEP}{r.value_pattern()}" for r in _OWN),
        ]
    )
    + ")"
)
_SELF = "(?:" + "|".join(rf"{re.escape(r.id_prefix.lower())}{r.id_pattern}" for r in _PREFIXED) + ")"
_ONE = rf"(?:{_KINDED}|{_SELF})"
_BARE = "(?:" + "".join(f"{r.id_pattern}|" for r in _OWN if not r.id_prefix) + r"\d+)"
_JOIN = r"[ \t]*(?:[,;]|\band\b|&)[ \t]*"
_GROUP_ITEMS = rf"{_ONE}(?:{_JOIN}(?:{_ONE}|{_BARE}))*"
_URL = r"https?://(?:www\.)?(?:" + "|".join(p for r in SOURCES.values() for p in r.url_patterns) + rf"){_VALUE}/?"
_URL_RULES = [(re.compile(p, re.IGNORECASE), r) for r in SOURCES.values() for p in r.url_patterns]
# One regex for every form; the leading blanks are part of the match so that a removed citation takes its
# blank with it ("benefit [PMID:9]." -> "benefit.").
_CITATION = re.compile(
    rf"(?P<lead>[ \t]*)(?:"
    rf"(?P<url>\b{_URL})"
    rf"|\[[ \t]*(?P<square>{_GROUP_ITEMS})[ \t]*[,;]?[ \t]*\]"
    rf"|\([ \t]*(?P<round>{_GROUP_ITEMS})[ \t]*[,;]?[ \t]*\)"
    rf"|\[[ \t]*(?P<bare>\d{{5,9}}(?:{_JOIN}\d+)*)[ \t]*\]"
    rf"|(?P<inline>(?<![\w:/])(?:{_KINDED}|{_SELF}))\b"
    rf")",
    re.IGNORECASE,
)
_OWN_BARE = "|".join(r.id_pattern for r in _OWN if not r.id_prefix) or "(?!)"
# A set id is read whole before anything else: it may begin with letters that spell a kind ("fda1...").
_TOKEN = re.compile(rf"(?P<own>{_OWN_BARE})|(?P<kind>{_KIND})?{_SEP}(?P<value>{_VALUE})", re.IGNORECASE)
_URL_ID = re.compile(rf"[/=](?P<value>{_VALUE})/?$", re.IGNORECASE)
_CANONICAL_ID = "(?:" + "|".join(KINDS) + "):[A-Za-z0-9-]+"
_CANONICAL = re.compile(rf"\[{_CANONICAL_ID}(?:, {_CANONICAL_ID})*\]")
_LEADING_CITATIONS = re.compile(rf"(?:{_CANONICAL.pattern}[ \t]*)+")
# How long an open bracket is held back at most: a real citation group closes well before this.
_MAX_OPEN = 240
_TRAILING_KIND = re.compile(rf"(?:{_KINDED}|{_KIND}{_SEP})[ \t]*$", re.IGNORECASE)


def normalise(kind: str, value: str) -> str:
    """``("pmid", "123")`` -> ``PMID:123``; ``("PMCID", "123")`` -> ``PMCID:PMC123``; ids read by their prefix
    first (``("PMID", "NBK1")`` -> ``NBK:NBK1``), then by their kind when they have its shape, then by a shape
    of their own (a set id), anything else as a PMID."""
    value = value.strip()
    upper = value.upper()
    by_kind = rule_by_kind(kind.strip())
    rule = (
        next((r for r in _PREFIXED if upper.startswith(r.id_prefix)), None)
        or (by_kind if by_kind is not None and by_kind.valid(value) else None)
        or next((r for r in _OWN if r.valid(value)), None)
        or PUBMED
    )
    return rule.citation_id(rule.canonical(value))


def parse_id(raw: str) -> str | None:
    """One id written any way (``123``, ``PMID 123``, ``pmc5``, ``[NBK:NBK1]``) in canonical form, or None."""
    found = ids_in(raw.strip().strip("[]()").strip())
    return found[0] if len(found) == 1 else None


def ids_in(group: str) -> list[str]:
    """The ids of one citation group; a bare number takes the kind of the id before it (PMID at first)."""
    out: list[str] = []
    kind = "PMID"
    for m in _TOKEN.finditer(group):
        if m.group("kind"):
            kind = m.group("kind").upper()
        cid = normalise(kind, m.group("own") or m.group("value"))
        if cid not in out:
            out.append(cid)
    return out


def _match_ids(m: re.Match[str]) -> list[str]:
    if m.group("url"):
        url = m.group("url")
        u = _URL_ID.search(url)
        if u is None:  # pragma: no cover - the URL pattern always ends in an id
            return []
        rule = next((r for pattern, r in _URL_RULES if pattern.search(url)), PUBMED)
        return [normalise(rule.citation_kind, u.group("value"))]
    group = m.group("square") or m.group("round") or m.group("bare") or m.group("inline") or ""
    return ids_in(group)


def cited_ids(text: str) -> list[str]:
    """Every cited id in order of first appearance, without repeats, whatever form it was written in."""
    out: dict[str, None] = {}
    for m in _CITATION.finditer(text):
        for cid in _match_ids(m):
            out[cid] = None
    return list(out)


def rewrite(
    text: str, allowed: Collection[str], render: Callable[[list[str]], str] | None = None
) -> tuple[str, list[str]]:
    """``text`` with each citation among ``allowed`` in canonical form and every other one removed.

    Returns the text and the ids it cited (in order, without repeats). ``render`` turns the kept ids of one
    citation into its text (default ``[PMID:1, PMID:2]``). Whitespace is kept as it is except the blank before
    a removed citation, so the pieces of a stream rewrite to the pieces of the whole.
    """
    cited: dict[str, None] = {}
    draw = render or _canonical

    def fix(m: re.Match[str]) -> str:
        ids = _match_ids(m)
        for cid in ids:
            cited[cid] = None
        keep = [c for c in ids if c in allowed]
        if not keep:
            return ""
        if m.group("url"):
            return m.group(0)
        return m.group("lead") + draw(keep)

    return _CITATION.sub(fix, text), list(cited)


def scrub(text: str, allowed: Collection[str]) -> tuple[str, list[str]]:
    """``text`` with only the ``allowed`` citations left (canonical form); returns it and the ids removed."""
    out, cited = rewrite(text, allowed)
    return out, [c for c in cited if c not in allowed]


def _canonical(ids: list[str]) -> str:
    return "[" + ", ".join(ids) + "]"


class StreamGate:
    """Citations checked as the text streams: :meth:`push` each piece, then :meth:`close`.

    Each call returns the text safe to send now: every citation in it is among ``allowed`` (others are removed
    and listed in :attr:`removed`). Held back until more text comes: an open ``[`` or ``(`` until it closes
    (or grows past any citation's length), and the last word with the blank before it, since the next piece
    may turn it into a citation (``PMID`` + `` 123``) or a removed citation would take that blank with it.
    """

    def __init__(self, allowed: Collection[str]):
        self.allowed = frozenset(allowed)
        self.removed: list[str] = []
        self.cited: list[str] = []
        self._pending = ""

    def push(self, text: str) -> str:
        self._pending += text
        cut = self._safe_end(self._pending)
        ready, self._pending = self._pending[:cut], self._pending[cut:]
        return self._release(ready)

    def close(self) -> str:
        """The rest, at the end of a complete answer (an unclosed bracket is checked as it stands)."""
        ready, self._pending = self._pending, ""
        return self._release(ready)

    def discard(self) -> None:
        """Forget what is held back (a stream that ended in an error sends none of it)."""
        self._pending = ""

    def _release(self, ready: str) -> str:
        if not ready:
            return ""
        out, cited = rewrite(ready, self.allowed)
        for cid in cited:
            if cid not in self.cited:
                self.cited.append(cid)
            if cid not in self.allowed and cid not in self.removed:
                self.removed.append(cid)
        return out

    @staticmethod
    def _safe_end(text: str) -> int:
        cut = len(text)
        # The last word and the blank before it: the next piece may extend it into a citation.
        m = re.search(r"[ \t]*\S*$", text)
        if m is not None:
            cut = m.start()
        # An id kind waiting for its number ("... PMID 12" + "34"), with what came before it on the line.
        k = _TRAILING_KIND.search(text)
        if k is not None:
            cut = min(cut, k.start())
        # An open bracket that has not closed yet.
        for opener, closer in (("[", "]"), ("(", ")")):
            i = text.rfind(opener)
            if i >= 0 and text.find(closer, i) < 0 and len(text) - i <= _MAX_OPEN:
                cut = min(cut, i)
        # Never inside a citation that is already whole ("(PMID: 4)" is one word to the reader, two here).
        for c in _CITATION.finditer(text):
            if c.start() < cut < c.end():
                cut = c.start()
        # Blanks before the cut go with what follows (a removed citation takes its blank).
        while cut > 0 and text[cut - 1] in " \t":
            cut -= 1
        return cut


@dataclass
class VerifiedAnswer:
    text: str
    citations: list[Citation]
    check: CitationCheck


class CitationVerifier:
    """Checks an answer's citations against the sources it was given, and renumbers them [1], [2]...

    ``numbering`` maps citation ids to display numbers already used earlier in a conversation, so a
    paper keeps its number across turns; new ids continue the sequence, strongest evidence first (the source's
    ``evidence_level``, unknown counting as the neutral 0.5), equal evidence in order of first appearance. The
    citation list is in number order, so it lists an answer's new sources strongest evidence first and its
    numbers are those of the numbered answer.
    """

    def __init__(self, sources: Sequence[SearchHit], numbering: dict[str, int] | None = None):
        self.sources: dict[str, SearchHit] = {}
        for hit in sources:
            self.sources.setdefault(hit.citation_id, hit)
        self.numbering = dict(numbering or {})

    def verify(self, text: str, *, renumber: bool = False) -> VerifiedAnswer:
        with_ids, cited = rewrite(text, self.sources)
        verified = [c for c in cited if c in self.sources]
        removed = [c for c in cited if c not in self.sources]
        first = {c: i for i, c in enumerate(verified)}
        for c in sorted(verified, key=lambda c: (-evidence_weight_of(self.sources[c]), first[c])):
            self._number(c)  # new ids: strongest evidence first, then in order of first appearance
        with_ids = _tidy(with_ids)
        if renumber:
            cleaned = _tidy(rewrite(text, self.sources, lambda ids: "".join(f"[{self._number(c)}]" for c in ids))[0])
        else:
            cleaned = with_ids
        # A claim whose only citation was removed is now uncited, and flagged as such.
        uncited = [s for s in _cited_as_written(split_sentences(with_ids)) if _is_claim(s) and not _CANONICAL.search(s)]
        citations = [self._citation(c) for c in sorted(verified, key=self._number)]
        return VerifiedAnswer(
            cleaned,
            citations,
            CitationCheck(cited=cited, verified=verified, removed=removed, uncited_sentences=uncited),
        )

    def _number(self, cid: str) -> int:
        if cid not in self.numbering:
            self.numbering[cid] = max(self.numbering.values(), default=0) + 1
        return self.numbering[cid]

    def _citation(self, cid: str) -> Citation:
        hit = self.sources[cid]
        return Citation(
            number=self._number(cid),
            citation_id=cid,
            document_id=hit.document_id,
            title=hit.title,
            journal=hit.journal,
            year=hit.year,
            url=hit.url,
            citation_metrics=hit.citation_metrics,
        )


@dataclass(frozen=True)
class CitedClaim:
    """A sentence of a verified text that cites something: ``text[start:end]`` is the sentence as written (its
    citations included, a leading list bullet not), ``plain`` the sentence without citations, ``ids`` what it
    cites."""

    plain: str
    ids: list[str]
    start: int
    end: int


def cited_claims(text: str) -> list[CitedClaim]:
    """Each sentence of a verified (canonical) text that cites something, with its place in ``text``.

    A citation standing alone after a full stop ("... benefit. [PMID:1]") belongs to the sentence before it, and
    so does one opening the next sentence ("... benefit. [PMID:1] Harms were rare.").
    """
    pieces: list[tuple[str, int, int]] = []  # sentence text, start, end
    offset = 0
    for line in text.splitlines(keepends=True):
        body = line.rstrip("\r\n")
        breaks = list(SENTENCE_BREAK.finditer(body))
        bounds = zip([0, *(b.end() for b in breaks)], [*(b.start() for b in breaks), len(body)], strict=True)
        for lo, hi in bounds:
            raw = body[lo:hi]
            s = raw.strip()
            if not s:
                continue
            start = offset + lo + (len(raw) - len(raw.lstrip()))
            end = start + len(s)
            k = _belongs_before(s) if pieces else 0
            if k:
                pieces[-1] = (f"{pieces[-1][0]} {s[:k]}", pieces[-1][1], start + k)
                rest = s[k:]
                s, start = rest.lstrip(), start + k + len(rest) - len(rest.lstrip())
            if s:
                pieces.append((s, start, end))
        offset += len(line)
    out = []
    for s, start, end in pieces:
        ids = cited_ids(s)
        plain = _tidy(_CITATION.sub("", s)).lstrip("-*• ").strip()
        if ids and plain:
            bullet = len(s) - len(s.lstrip("-*• "))
            out.append(CitedClaim(plain, ids, start + bullet, end))
    return out


def cited_sentences(text: str) -> list[tuple[str, list[str]]]:
    """Each sentence of a verified (canonical) text that cites something: its text without citations, its ids
    (:func:`cited_claims` without the places)."""
    return [(c.plain, c.ids) for c in cited_claims(text)]


def merge_check(
    check: CitationCheck, removed: Iterable[str] = (), unsupported: Iterable[UnsupportedClaim] = ()
) -> CitationCheck:
    """``check`` with more removed ids and unsupported claims added (no repeats)."""
    gone = list(dict.fromkeys([*check.removed, *removed]))
    claims = list(check.unsupported)
    seen = {(u.sentence, tuple(u.citation_ids)) for u in claims}
    for u in unsupported:
        if (u.sentence, tuple(u.citation_ids)) not in seen:
            claims.append(u)
    return check.model_copy(update={"removed": gone, "unsupported": claims})


def gate_summary(summary: EvidenceSummary, allowed: Collection[str]) -> tuple[EvidenceSummary, list[str]]:
    """The summary with every inline citation of its text and findings checked like an answer's; the ids removed."""
    removed: list[str] = []

    def clean(text: str) -> str:
        out, gone = scrub(text, allowed)
        removed.extend(g for g in gone if g not in removed)
        return out.strip()

    findings = []
    for f in summary.key_findings:
        text = clean(f.finding)
        if text:
            findings.append(f.model_copy(update={"finding": text}))
    gated = summary.model_copy(update={"summary": clean(summary.summary), "key_findings": findings})
    return gated, removed


def gate_reply(reply: SynthesisReply, allowed: Collection[str]) -> SynthesisReply:
    """A synthesizer reply checked again where it reaches a client: only ``allowed`` ids in its answer, its
    numbered answer, its citations and its summary; anything more removed and reported in its citation check.
    """
    answer, gone = scrub(reply.answer, allowed)
    numbered = reply.numbered_answer
    if numbered is not None:
        numbered, more = scrub(numbered, allowed)
        gone += more
    summary = reply.summary
    if summary is not None:
        summary, more = gate_summary(summary, allowed)
        pmids = [p for p in summary.supporting_pmids if (parse_id(p) or p) in allowed]
        gone += [parse_id(p) or p for p in summary.supporting_pmids if p not in pmids]
        summary = summary.model_copy(update={"supporting_pmids": pmids})
        gone += more
    citations = [c for c in reply.citations if c.citation_id in allowed]
    gone += [c.citation_id for c in reply.citations if c.citation_id not in allowed]
    if not gone:
        return reply
    return reply.model_copy(
        update={
            "answer": _tidy(answer),
            "numbered_answer": _tidy(numbered) if numbered is not None else None,
            "summary": summary,
            "citations": citations,
            "citation_check": merge_check(reply.citation_check, gone),
        }
    )


def _cited_as_written(sentences: list[str]) -> list[str]:
    """``sentences`` with the citations opening one ("... benefit. [PMID:1] Harms were rare.") or standing alone
    moved to the end of the sentence before it, whose citations they are (as :func:`cited_claims` reads them)."""
    out: list[str] = []
    for s in sentences:
        k = _belongs_before(s) if out else 0
        if k:
            out[-1] = f"{out[-1]} {s[:k]}"
            s = s[k:].lstrip()
        if s:
            out.append(s)
    return out


def _belongs_before(sentence: str) -> int:
    """How much of ``sentence`` (stripped) belongs to the sentence before it: all of it when it is nothing but
    citations and punctuation ("... benefit. [PMID:1]"), the citations opening it when a claim follows them
    ("... benefit. [PMID:1] Harms were rare."), else nothing. The one rule :func:`cited_claims` and the
    uncited-claim check share."""
    if not _CITATION.sub("", sentence).strip(" \t.;,"):
        return len(sentence)
    lead = _LEADING_CITATIONS.match(sentence)
    return len(lead.group().rstrip()) if lead is not None else 0


def _tidy(text: str) -> str:
    # "benefit. [PMID:1]." without its citation ends in one stop, not two (an ellipsis stays).
    text = re.sub(r"(?<![.])([.!?])[ \t]*\.(?![.])", r"\1", text)
    text = re.sub(r"[ \t]+([.,;:!?])", r"\1", text)
    return re.sub(r"[ \t]{2,}", " ", text).strip()


def _is_claim(sentence: str) -> bool:
    """Headings, questions and very short fragments make no claim that needs a source."""
    s = sentence.strip()
    if len(s.split()) < 5 or s.endswith("?") or s.endswith(":") or s.startswith("#"):
        return False
    lowered = s.lower()
    return not lowered.startswith(
        ("note:", "disclaimer", "this answer", "this is not medical advice", "extractive answer")
    )
