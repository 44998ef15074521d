"""Query intelligence shared by the answering routes, ``/v1/query`` and ``/v1/ask`` (and its stream): one owner of
how a question is understood and routed, whichever route asked.

- :class:`QueryAnalyser` classifies the question (:mod:`~services.gateway.understanding.classify`), detects its
  language (:mod:`~services.gateway.understanding.language`) and decides what is searched
  (:mod:`~services.gateway.understanding.enhance`): ``/v1/query`` enhances (Claude's rewrite, or offline the
  stored MeSH headings); ``/v1/ask`` only translates (with a key, a question not in English is searched as
  Claude's English translation; MeSH enhancement stays off there until the retrieval harness shows it does
  not hurt).
- :class:`Analysis` says in which language the answer is written and the instruction that asks the model for it,
  and gives the response's ``QueryIntelligence`` object.
- :func:`check_interaction` runs the drug-interaction check of an interaction question;
  :func:`routed_search` searches guideline sources first for a guideline question (every source when none
  of them clears ``EVIDENTIA_RETRIEVAL_MIN_SCORE``).

Every LLM call goes through the synthesizer's steps over Kafka (:class:`WorkflowLlm`); offline the rules
decide and nothing is translated.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from services.gateway.intelligence.cache import Cache
from services.gateway.intelligence.llm import WorkflowLlm
from services.gateway.schemas.common import ClassificationOut, LanguageOut, QueryIntelligence
from services.gateway.understanding.classify import Classification, QueryClassifier
from services.gateway.understanding.enhance import Enhancement, QueryEnhancer
from services.gateway.understanding.language import NAMES, Language, detect_language

log = logging.getLogger(__name__)

Vocabulary = Callable[[], Awaitable[dict[str, int]]]


def language_named(code: str) -> Language:
    """The language of an ISO 639-1 code the asker gave (``fr`` -> French), as the detector names it."""
    code = code.lower()
    name = NAMES.get(code) or next((n for c, n in NAMES.items() if c.split("-")[0] == code), code)
    return Language(code, name, 1.0, "given")


@dataclass
class Analysis:
    """What is known of a question before retrieval."""

    classification: Classification
    language: Language
    """The question's language, as detected."""
    enhancement: Enhancement
    asker: Language | None = None
    """The language the asker gave (``/v1/ask``'s ``language``); None: the detected one is the asker's."""
    can_write: bool = False
    """Whether the answer can be written in another language than English (a model is configured)."""

    @property
    def emergency(self) -> bool:
        return self.classification.category == "emergency"

    @property
    def target(self) -> Language:
        """The language the answer should be in: the asker's, given or detected."""
        return self.asker or self.language

    @property
    def answer_language(self) -> str:
        """The code of the language the answer is written in, when the model writes it (offline: English)."""
        t = self.target
        return t.code if t.english or self.can_write else "en"

    @property
    def instruction(self) -> str:
        """What the synthesis is asked besides the question: the answer's language when it is not English."""
        t = self.target
        return f"Write the answer in {t.name}." if self.can_write and not t.english else ""

    def question_for_synthesis(self, question: str) -> str:
        """The question the synthesizer answers: in English (translated when it could be), with the instruction."""
        return (question + (f"\n\n{self.instruction}" if self.instruction else ""))[:10_000]

    def intelligence(self) -> QueryIntelligence:
        c, lang, enh = self.classification, self.language, self.enhancement
        notes = [enh.note] if enh.note else []
        if self.asker is not None and self.asker.code != lang.code:
            notes.append(
                f"The asker's language is {self.asker.name} ({self.asker.code}, given); the question reads {lang.name}."
            )
        return QueryIntelligence(
            classification=ClassificationOut(category=c.category, method=c.method, signals=c.signals),
            language=LanguageOut(code=lang.code, name=lang.name, confidence=lang.confidence, method=lang.method),
            english_question=enh.english_question,
            searched_query=enh.search_query,
            enhancement=enh.method,
            terms=enh.terms,
            translated=enh.translated,
            notes=notes,
        )


class QueryAnalyser:
    """Classification, language and what is searched, for any answering route."""

    def __init__(self, llm: WorkflowLlm, cache: Cache, *, ttl_s: float, vocabulary: Vocabulary | None = None):
        self.llm = llm
        self.cache = cache
        self.ttl_s = ttl_s
        self.vocabulary = vocabulary

    async def analyse(self, question: str, *, enhance: bool = True, asker_language: str | None = None) -> Analysis:
        """``enhance``: Claude's rewrite, or offline the stored MeSH headings (``/v1/query``); otherwise only a
        translation of a question not in English (``/v1/ask``). ``asker_language``: the ISO 639-1 code the
        asker gave, which the answer is written in (with a model)."""
        classification = await QueryClassifier(self.llm).classify(question)
        language = detect_language(question)
        asker = language_named(asker_language) if asker_language else None
        enhancer = QueryEnhancer(self.llm, self.cache, ttl_s=self.ttl_s)
        if classification.category == "emergency":
            enh = Enhancement(question, question, question, "none")
        elif enhance:
            vocab = {} if self.llm.available else await self._vocabulary()
            enh = await enhancer.enhance(question, language, vocab)
        else:
            enh = await enhancer.translate(question, language)
        # /v1/query answers in the question's language when Claude translated it; a given language needs a model.
        can_write = enh.translated or (asker is not None and self.llm.available)
        return Analysis(classification, language, enh, asker, can_write)

    async def _vocabulary(self) -> dict[str, int]:
        if self.vocabulary is None:
            return {}
        try:
            return await self.vocabulary()
        except Exception as exc:  # enhancement helps; it never fails the question
            log.warning("MeSH vocabulary unavailable", extra={"error": repr(exc)[:300]})
            return {}
