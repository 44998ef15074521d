"""Query enhancement (``QueryEnhancer``): what is actually searched, shown to the user.

With Claude (the synthesizer's ``enhance`` step): one forced tool call turns the question (in any
language) into an English question and a literature-search query with medical terms. Offline: a question
not in English cannot be translated (the response says so); an English one is expanded with MeSH
descriptors taken from the stored documents' own headings (``documents.mesh_terms``): a descriptor is
added when all its words occur in the question, or when a lay term of the question maps to it
(:data:`LAY_TO_MESH`) and the corpus uses it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from services.gateway.intelligence.cache import Cache, cache_key, cached
from services.gateway.intelligence.llm import WorkflowLlm
from services.gateway.understanding.language import Language
from shared.text import MESH_WORD, QUERY_STOP_WORDS, singular

# Check tags and other headings that say nothing about a question's topic.
GENERIC_MESH = frozenset(
    s.lower()
    for s in (
        "Humans",
        "Animals",
        "Female",
        "Male",
        "Adult",
        "Aged",
        "Aged, 80 and over",
        "Middle Aged",
        "Young Adult",
        "Adolescent",
        "Child",
        "Child, Preschool",
        "Infant",
        "Infant, Newborn",
        "Pregnancy",
        "Retrospective Studies",
        "Prospective Studies",
        "Follow-Up Studies",
        "Treatment Outcome",
        "Risk Factors",
        "Time Factors",
        "Cross-Sectional Studies",
        "Surveys and Questionnaires",
        "Questionnaires",
        "Reproducibility of Results",
        "Sensitivity and Specificity",
        "Cohort Studies",
        "Case-Control Studies",
        "Rats",
        "Mice",
        "Incidence",
        "Prevalence",
        "Prognosis",
        "Severity of Illness Index",
        "Age Factors",
        "Sex Factors",
    )
)
LAY_TO_MESH: dict[str, tuple[str, ...]] = {
    "heart attack": ("Myocardial Infarction",),
    "high blood pressure": ("Hypertension",),
    "blood pressure": ("Blood Pressure",),
    "statin": ("Hydroxymethylglutaryl-CoA Reductase Inhibitors",),
    "statins": ("Hydroxymethylglutaryl-CoA Reductase Inhibitors",),
    "blood thinner": ("Anticoagulants",),
    "blood thinners": ("Anticoagulants",),
    "pcos": ("Polycystic Ovary Syndrome",),
    "diabetes": ("Diabetes Mellitus", "Diabetes Mellitus, Type 2"),
    "type 2 diabetes": ("Diabetes Mellitus, Type 2",),
    "cancer": ("Neoplasms",),
    "kidney": ("Kidney Diseases",),
    "stroke": ("Stroke",),
    "dementia": ("Dementia",),
    "mammogram": ("Mammography",),
    "mammograms": ("Mammography",),
    "pregnant": ("Pregnancy",),
    "pregnancy": ("Pregnancy Complications",),
    "obesity": ("Obesity",),
    "overweight": ("Overweight",),
    "depression": ("Depression", "Depressive Disorder"),
    "antibiotics": ("Anti-Bacterial Agents",),
    "painkillers": ("Analgesics",),
    "flu": ("Influenza, Human",),
    "covid": ("COVID-19",),
    "afib": ("Atrial Fibrillation",),
    "heart failure": ("Heart Failure",),
    "smoking": ("Smoking",),
}


def words(text: str) -> list[str]:
    return [singular(w) for w in MESH_WORD.findall(text.lower()) if w not in QUERY_STOP_WORDS]


def mesh_expand(question: str, vocabulary: Mapping[str, int], *, limit: int = 6) -> list[str]:
    """MeSH descriptors of the stored corpus that the question names or implies, most used first."""
    q_words = set(words(question))
    q_text = " " + " ".join(MESH_WORD.findall(question.lower())) + " "
    by_lower = {d.lower(): d for d in vocabulary}
    found: dict[str, int] = {}
    for lay, descriptors in LAY_TO_MESH.items():
        if f" {lay} " in q_text:
            for d in descriptors:
                if d.lower() in by_lower:
                    found[by_lower[d.lower()]] = vocabulary[by_lower[d.lower()]]
    for descriptor, uses in vocabulary.items():
        low = descriptor.lower()
        if low in GENERIC_MESH:
            continue
        d_words = set(words(descriptor.replace(",", " ")))
        if d_words and d_words <= q_words:
            found[descriptor] = uses
    ranked = sorted(found, key=lambda d: (-found[d], d))
    return ranked[:limit]


def expanded_query(question: str, descriptors: list[str]) -> str:
    """The question plus the descriptors it does not already spell out."""
    q = question.lower()
    extra = [d for d in descriptors if d.lower() not in q]
    return question if not extra else f"{question.strip()} {' '.join(extra)}"


@dataclass
class Enhancement:
    original: str
    english_question: str
    search_query: str
    method: str  # llm | mesh | translation | none | untranslated
    terms: list[str] = field(default_factory=list)
    translated: bool = False
    note: str | None = None


class QueryEnhancer:
    def __init__(self, llm: WorkflowLlm, cache: Cache, *, ttl_s: float = 5 * 24 * 3600):
        self.llm = llm
        self.cache = cache
        self.ttl_s = ttl_s

    async def _llm(self, question: str, language: Language) -> dict[str, Any] | None:
        async def make() -> dict[str, Any] | None:
            data = await self.llm.step("enhance", {"question": question, "language": language.name})
            if data is None:
                return None
            english = str(data.get("english_question") or "").strip()
            search = str(data.get("search_query") or "").strip()
            if not (0 < len(english) <= 2000 and 0 < len(search) <= 2000):
                return None
            terms = [str(t)[:200] for t in data.get("terms") or [] if isinstance(t, str)][:20]
            return {"english_question": english, "search_query": search, "terms": terms}

        if not self.llm.available:
            return None
        value, _ = await cached(self.cache, "query_rewrite", cache_key(question), self.ttl_s, make)
        return value if isinstance(value, dict) else None

    async def enhance(self, question: str, language: Language, vocabulary: Mapping[str, int]) -> Enhancement:
        data = await self._llm(question, language)
        if data is not None:
            return Enhancement(
                question,
                data["english_question"],
                data["search_query"],
                "llm",
                list(data["terms"]),
                translated=not language.english,
            )
        if not language.english:
            return _untranslated(question, language)
        descriptors = mesh_expand(question, vocabulary)
        if not descriptors:
            return Enhancement(question, question, question, "none", note="no stored MeSH heading matched")
        return Enhancement(question, question, expanded_query(question, descriptors), "mesh", descriptors)

    async def translate(self, question: str, language: Language) -> Enhancement:
        """Translation only, no enhancement (``/v1/ask``): an English question is searched as asked; another is
        searched as Claude's English question (the ``enhance`` step's, cached alike; its search query and terms are
        not used), or as asked when there is no model."""
        if language.english:
            return Enhancement(question, question, question, "none")
        data = await self._llm(question, language)
        if data is None:
            return _untranslated(question, language)
        english = data["english_question"]
        return Enhancement(question, english, english, "translation", translated=True)


def _untranslated(question: str, language: Language) -> Enhancement:
    return Enhancement(
        question,
        question,
        question,
        "untranslated",
        note=(
            f"The question looks {language.name}; translating it needs the LLM (no ANTHROPIC_API_KEY is "
            "set), so it was searched as written and the answer is in English."
        ),
    )
