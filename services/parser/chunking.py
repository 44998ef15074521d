"""``full_text`` layout, section-aware chunking and the text each chunk is embedded as.

Layout. ``full_text`` is the document's sections in reading order, each written as its
heading on one line then its text, sections separated by a blank line. ``sections`` lists every section
as ``{title, char_start, char_end}`` where ``full_text[char_start:char_end]`` is the section's *own* text
(heading excluded, subsections excluded): the spans never overlap. ``title`` is the section's title path
("Methods > Statistical analysis"; for guidelines "Book > Chapter > Section > Subsection"), so the
hierarchy can be rebuilt from the list, and a section with its subsections is
``full_text[s.char_start : last_descendant.char_end]``. A section with only subsections has an empty span.

Articles (PubMed, PMC). Each section is cut on its own (a chunk never crosses sections) into chunks of at
most ``cap`` tokens with ``overlap`` tokens shared between neighbours (default 512 / 50), preferring a
paragraph break, then a sentence break, then a space, never cutting a word unless one word is over the cap.

Guidelines (Bookshelf). Hierarchical: a section that fits the cap (1,000 by default) with all its
subsections is one chunk; a larger one yields its own text (split as above, without overlap) and recurses
into its subsections; so no chunk exceeds the cap. The title path is the chunk's ``section`` and is put in
front of the text that is embedded (see :func:`embedding_text`).

Caps. Counts are tokens of the embedding model's own tokenizer, special tokens excluded. The cap that
applies to a chunk is ``min(setting, max_seq_length - special_tokens - tokens(prefix))`` where the prefix is
"Document: …\\nSection: …\\n\\n":
the whole embedding text must fit what the model embeds, or the model would silently truncate it. With
all-MiniLM-L6-v2 (max_seq_length 256) that is about 200 tokens, whatever the 512 / 1,000 settings say.
The cap never goes below ``min_tokens`` (32): a title path longer than the model's window is the one case
where the model truncates.

Every chunk keeps ``section``, ``ordinal`` (0.. in reading order), ``char_start``/``char_end`` with
``full_text[char_start:char_end] == text``, and ``token_count == tokenizer.count(text)``.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from functools import lru_cache

from services.parser.tokens import Tokenizer, TokenizerError, get_tokenizer
from shared.models import Chunk, ParsedDocument, Section
from shared.settings import ChunkingSettings, EmbeddingSettings, Settings
from shared.sources import guideline_sources
from shared.text import SENTENCE_END

SEPARATOR = "\n\n"
PATH_SEPARATOR = " > "
_SENTENCE_END = frozenset(SENTENCE_END)
_CLOSERS = frozenset({")", "]", '"', "'", "\u201d", "\u2019"})


def embedding_text(title: str, section: str | None, content: str) -> str:
    """What is embedded for a chunk: "Document: {title}\\nSection: {section}\\n\\n{content}"."""
    if section is None:
        return f"Document: {title}\n\n{content}"
    return f"Document: {title}\nSection: {section}\n\n{content}"


class FullTextBuilder:
    """Builds ``full_text`` and its ``sections`` in the layout described above."""

    def __init__(self) -> None:
        self._parts: list[str] = []
        self._length = 0
        self._sections: list[Section] = []

    def _append(self, text: str) -> None:
        self._parts.append(text)
        self._length += len(text)

    def add(self, title: str, text: str, *, heading: str | None = None) -> Section:
        """Add a section: ``heading`` (default: the last part of ``title``) on a line, then ``text``."""
        if heading is None:
            heading = title.rsplit(PATH_SEPARATOR, 1)[-1]
        text = text.strip()
        if self._length:
            self._append(SEPARATOR)
        if heading:
            self._append(heading + "\n")
        start = self._length
        self._append(text)
        section = Section(title=title, char_start=start, char_end=self._length)
        self._sections.append(section)
        return section

    def build(self) -> tuple[str, list[Section]]:
        """The full text written so far and its sections (with their character offsets into that text)."""
        return "".join(self._parts), list(self._sections)


@dataclass(frozen=True)
class Span:
    """A piece of text: ``[start, end)`` character offsets and its token count."""

    start: int
    end: int
    tokens: int


class Chunker:
    """Cuts documents into chunks measured in the embedding model's tokens."""

    def __init__(
        self,
        tokenizer: Tokenizer,
        *,
        tokens: int = 512,
        overlap: int = 50,
        guideline_tokens: int = 1000,
        max_seq_length: int | None = None,
        min_tokens: int = 32,
    ) -> None:
        if overlap < 0 or tokens < 1 or guideline_tokens < 1:
            raise ValueError("chunk sizes must be positive and the overlap not negative")
        self.tokenizer = tokenizer
        self.tokens = tokens
        self.overlap = overlap
        self.guideline_tokens = guideline_tokens
        self.max_seq_length = max_seq_length if max_seq_length is not None else tokenizer.max_seq_length
        self.min_tokens = min_tokens
        self._caps: dict[tuple[str, str | None, bool], int] = {}

    @classmethod
    def from_settings(
        cls, chunking: ChunkingSettings | None = None, embedding: EmbeddingSettings | None = None
    ) -> Chunker:
        """The chunker the settings describe: sizes from ``chunking``, tokenizer of the embedding model."""
        chunking = chunking if chunking is not None else ChunkingSettings()
        embedding = embedding if embedding is not None else EmbeddingSettings()
        tokenizer = get_tokenizer(chunking.tokenizer or embedding.model)
        max_seq = tokenizer.max_seq_length
        if chunking.tokenizer and chunking.tokenizer != embedding.model:
            with contextlib.suppress(TokenizerError):
                max_seq = get_tokenizer(embedding.model).max_seq_length
        return cls(
            tokenizer,
            tokens=chunking.tokens,
            overlap=chunking.overlap,
            guideline_tokens=chunking.guideline_tokens,
            max_seq_length=max_seq,
        )

    # -- caps ---------------------------------------------------------------------------------------------

    def cap(self, title: str, section: str | None, *, guideline: bool = False) -> int:
        """Largest chunk, in tokens, for this document title and section (see the module doc)."""
        key = (title, section, guideline)
        cached = self._caps.get(key)
        if cached is not None:
            return cached
        prefix = self.tokenizer.count(embedding_text(title, section, ""))
        room = self.max_seq_length - self.tokenizer.special_tokens - prefix
        setting = self.guideline_tokens if guideline else self.tokens
        value = max(self.min_tokens, min(setting, room))
        self._caps[key] = value
        return value

    # -- documents ----------------------------------------------------------------------------------------

    def chunk(self, doc: ParsedDocument) -> list[Chunk]:
        """Chunks of a document: hierarchical for a guideline source's (:func:`shared.sources.guideline_sources`),
        windowed for articles."""
        if doc.source in guideline_sources():
            return self.chunk_guideline(doc)
        return self.chunk_article(doc)

    def chunk_article(self, doc: ParsedDocument) -> list[Chunk]:
        """An article's chunks: each section split into token-capped windows that overlap, in document order."""
        full = doc.full_text or ""
        chunks: list[Chunk] = []
        for sec in doc.sections:
            if sec.char_end <= sec.char_start:
                continue
            cap = self.cap(doc.title, sec.title)
            overlap = min(self.overlap, cap // 3)
            for span in self.split(full[sec.char_start : sec.char_end], cap, overlap, base=sec.char_start):
                chunks.append(self._chunk(full, sec.title, len(chunks), span))
        return chunks

    def chunk_guideline(self, doc: ParsedDocument) -> list[Chunk]:
        """A guideline's chunks: a section with its subsections becomes one chunk when it fits the cap, else
        its own text is split and each subsection is chunked the same way (document order)."""
        full = doc.full_text or ""
        sections = doc.sections
        children: list[list[int]] = [[] for _ in sections]
        roots: list[int] = []
        stack: list[int] = []
        for i, sec in enumerate(sections):
            while stack and not sec.title.startswith(sections[stack[-1]].title + PATH_SEPARATOR):
                stack.pop()
            (children[stack[-1]] if stack else roots).append(i)
            stack.append(i)
        ends = [s.char_end for s in sections]
        for i in reversed(range(len(sections))):
            for c in children[i]:
                ends[i] = max(ends[i], ends[c])
        chunks: list[Chunk] = []

        def visit(i: int) -> None:
            sec = sections[i]
            cap = self.cap(doc.title, sec.title, guideline=True)
            whole = self._fit(full, sec.char_start, ends[i], cap)
            if whole is not None:
                if whole.tokens:
                    chunks.append(self._chunk(full, sec.title, len(chunks), whole))
                return
            for span in self.split(full[sec.char_start : sec.char_end], cap, 0, base=sec.char_start):
                chunks.append(self._chunk(full, sec.title, len(chunks), span))
            for c in children[i]:
                visit(c)

        for r in roots:
            visit(r)
        return chunks

    def _fit(self, full: str, start: int, end: int, cap: int) -> Span | None:
        """The whole of ``full[start:end]`` (stripped) as one span if it fits ``cap``, else None."""
        text = full[start:end]
        offsets = self.tokenizer.offsets(text)
        if not offsets:
            return Span(start, start, 0)
        if len(offsets) > cap:
            return None
        s, e = offsets[0][0], offsets[-1][1]
        count = self.tokenizer.count(text[s:e])
        return Span(start + s, start + e, count) if count <= cap else None

    def _chunk(self, full: str, section: str | None, ordinal: int, span: Span) -> Chunk:
        return Chunk(
            section=section,
            ordinal=ordinal,
            text=full[span.start : span.end],
            token_count=span.tokens,
            char_start=span.start,
            char_end=span.end,
        )

    # -- text ---------------------------------------------------------------------------------------------

    def split(self, text: str, cap: int, overlap: int = 0, *, base: int = 0) -> list[Span]:
        """Cut ``text`` into spans of at most ``cap`` tokens, consecutive spans sharing up to ``overlap``.

        Breaks are taken at the last paragraph break in the window if it keeps at least half the cap,
        else at the last sentence end that does, else at the last space, else (one word over the cap)
        between tokens. Offsets are into ``text`` plus ``base``.
        """
        if cap < 1:
            raise ValueError("cap must be at least one token")
        overlap = max(0, min(overlap, cap - 1))
        offsets = self.tokenizer.offsets(text)
        n = len(offsets)
        if n == 0:
            return []
        levels = self._break_levels(text, offsets)
        spans: list[Span] = []
        i = 0
        while i < n:
            end = n if n - i <= cap else self._best_break(levels, i, i + cap, cap)
            while True:
                s, e = offsets[i][0], offsets[end - 1][1]
                count = self.tokenizer.count(text[s:e])
                if count <= cap or end - i <= 1:
                    break
                end = max(i + 1, end - max(1, count - cap))  # a cut inside a word tokenizes differently
            spans.append(Span(base + s, base + e, count))
            if end >= n:
                break
            nxt = end
            if overlap:
                lo = max(end - overlap, i + 1)
                starts = [b for b in range(lo, end) if levels[b] >= 2] or [b for b in range(lo, end) if levels[b] >= 1]
                if starts:
                    nxt = starts[0]
            i = nxt
        return spans

    @staticmethod
    def _break_levels(text: str, offsets: list[tuple[int, int]]) -> list[int]:
        """For each token boundary k (before token k): 3 paragraph, 2 sentence or line, 1 space, 0 none."""
        n = len(offsets)
        levels = [0] * (n + 1)
        for k in range(1, n):
            gap = text[offsets[k - 1][1] : offsets[k][0]]
            if not gap:
                continue
            newlines = gap.count("\n")
            if newlines >= 2:
                levels[k] = 3
            elif newlines == 1:
                levels[k] = 2
            else:
                prev = text[offsets[k - 1][0] : offsets[k - 1][1]]
                before = text[offsets[k - 2][0] : offsets[k - 2][1]] if k >= 2 else ""
                ends_sentence = prev in _SENTENCE_END or (prev in _CLOSERS and before in _SENTENCE_END)
                nxt = text[offsets[k][0]]
                levels[k] = 2 if ends_sentence and (nxt.isupper() or nxt.isdigit() or not nxt.isalpha()) else 1
        return levels

    @staticmethod
    def _best_break(levels: list[int], i: int, limit: int, cap: int) -> int:
        half = i + max(1, cap // 2)
        for level in (3, 2):
            for k in range(limit, half - 1, -1):
                if levels[k] >= level:
                    return k
        for k in range(limit, i, -1):
            if levels[k] >= 1:
                return k
        return limit


def build_chunker(settings: Settings | None = None) -> Chunker:
    """The chunker of a whole :class:`Settings` (its ``chunking`` and ``embedding`` parts)."""
    if settings is None:
        return Chunker.from_settings()
    return Chunker.from_settings(settings.chunking, settings.embedding)


@lru_cache(maxsize=1)
def default_chunker() -> Chunker:
    """The chunker of the current environment's settings (built once)."""
    return Chunker.from_settings()
