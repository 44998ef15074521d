"""Disease-name normalisation for PubMed searches (``disease_normalizer``).

1. Normalise: strip subtypes, staging and severity, aetiology and genetic qualifiers, keep the organ
   ("stage III non-small cell lung cancer" -> "non-small cell lung cancer"; "narcolepsy-cataplexy
   syndrome" -> "narcolepsy"), and add a well-known synonym joined with OR ("eczema OR dermatitis").
   Claude does it when a key is set (forced tool call); the rules below otherwise, or when Claude's answer
   is unusable.
2. Verify: with a drug, count PubMed hits of ``drug AND (term)``. Below ``min_results`` (default 3) one
   broader term is tried (Claude, else the rules: a known parent, else the term without its first
   qualifier) and used only if it has at least ``min_results`` hits itself and is not an over-generic
   word of :data:`BROADENING_BLOCKLIST`.

Normalised terms, broader terms and counts are cached (namespaces ``disease_norm``, ``disease_broader``,
``pubmed_count``).
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from services.gateway.intelligence.cache import Cache, cache_key, cached
from services.gateway.intelligence.llm import WorkflowLlm

Counter = Callable[[str], Awaitable[int | None]]
"""PubMed hit count of a query (None when it cannot be had)."""

BROADENING_BLOCKLIST = frozenset(
    {
        "cancer",
        "cancers",
        "disease",
        "diseases",
        "syndrome",
        "syndromes",
        "disorder",
        "disorders",
        "infection",
        "infections",
        "tumor",
        "tumors",
        "tumour",
        "tumours",
        "neoplasm",
        "neoplasms",
        "carcinoma",
        "condition",
        "conditions",
        "illness",
        "inflammation",
        "pain",
        "deficiency",
        "dysfunction",
        "failure",
        "injury",
        "lesion",
        "lesions",
        "abnormality",
        "abnormalities",
        "malignancy",
        "malformation",
        "medical condition",
    }
)

# Qualifiers removed by the rules (case-insensitive, whole words).
_STAGING = [
    r"\bstage\s+(?:[0-4]|i{1,3}v?|iv|v)[abc]?\b",
    r"\bgrade\s+[1-4]\b",
    r"\bclass\s+(?:[1-4]|i{1,3}v?|iv)\b",
    r"\b(?:mild|moderate|severe|moderate-to-severe|mild-to-moderate|early|early-stage|late|late-stage|advanced|"
    r"locally advanced|metastatic|end-stage|recurrent|refractory|relapsed|relapsing|resistant|"
    r"treatment-resistant|newly diagnosed|unspecified|nos)\b",
]
_SUBTYPE = [
    r"\btype\s+(?:[0-9]+[a-z]?|i{1,3}v?|iv|[a-c])\b",
    r"\bsubtype\s+\S+\b",
    r"\bvariant\b",
    r"\(.*?\)",
    r",\s*(?:unspecified|not otherwise specified)\b",
]
_AETIOLOGY = [
    r"\b(?:due to|secondary to|caused by|associated with|induced by|related to)\b.*$",
    r"\b(?:\w+\s){0,2}[\w-]+-(?:induced|associated|related|mediated|positive|negative)\b",
    r"\b(?:idiopathic|primary|secondary|acquired|drug-induced|alcoholic|non-alcoholic|viral|bacterial)\b",
]
_GENETIC = [
    r"\b(?:familial|hereditary|inherited|genetic|congenital|sporadic|x-linked|autosomal dominant|"
    r"autosomal recessive|germline|somatic)\b",
    r"\b[A-Z0-9]{2,}[0-9]\b(?=\s)",  # a gene symbol such as BRCA1 or EGFR2 before the disease name
]
_DISEASE_SUFFIX = re.compile(r"(?:psy|itis|osis|emia|aemia|ia|oma|pathy|ism)$")

# Well-known synonyms (one each), as PubMed users write them. Keys are normalised names.
SYNONYMS: dict[str, str] = {
    "eczema": "dermatitis",
    "atopic dermatitis": "eczema",
    "dermatitis": "eczema",
    "heart attack": "myocardial infarction",
    "myocardial infarction": "heart attack",
    "high blood pressure": "hypertension",
    "hypertension": "high blood pressure",
    "stroke": "cerebrovascular accident",
    "obesity": "overweight",
    "diabetes mellitus": "diabetes",
    "diabetes": "diabetes mellitus",
    "polycystic ovary syndrome": "PCOS",
    "pcos": "polycystic ovary syndrome",
    "gastroesophageal reflux disease": "GERD",
    "gerd": "gastroesophageal reflux disease",
    "chronic obstructive pulmonary disease": "COPD",
    "copd": "chronic obstructive pulmonary disease",
    "chronic kidney disease": "chronic renal insufficiency",
    "kidney disease": "renal disease",
    "alzheimer disease": "alzheimer's disease",
    "alzheimer's disease": "alzheimer disease",
    "parkinson disease": "parkinson's disease",
    "parkinson's disease": "parkinson disease",
    "depression": "depressive disorder",
    "major depressive disorder": "depression",
    "attention deficit hyperactivity disorder": "ADHD",
    "adhd": "attention deficit hyperactivity disorder",
    "tuberculosis": "TB",
    "lung cancer": "lung neoplasms",
    "breast cancer": "breast neoplasms",
    "non-small cell lung cancer": "NSCLC",
    "hepatocellular carcinoma": "liver cancer",
    "colorectal cancer": "colorectal neoplasms",
    "prostate cancer": "prostatic neoplasms",
    "narcolepsy": "hypersomnolence",
    "atrial fibrillation": "AF",
    "heart failure": "cardiac failure",
    "migraine": "migraine disorders",
    "rheumatoid arthritis": "RA",
    "multiple sclerosis": "MS",
    "malaria": "plasmodium infection",
    "psoriasis": "psoriatic disease",
    "asthma": "bronchial asthma",
}

# Broader categories that keep the organ (rules' broadening step).
PARENTS: dict[str, str] = {
    "non-small cell lung cancer": "lung cancer",
    "small cell lung cancer": "lung cancer",
    "lung adenocarcinoma": "lung cancer",
    "hepatocellular carcinoma": "liver cancer",
    "triple-negative breast cancer": "breast cancer",
    "ductal carcinoma": "breast cancer",
    "diabetic nephropathy": "kidney disease",
    "diabetic retinopathy": "retinopathy",
    "atopic dermatitis": "dermatitis",
    "plaque psoriasis": "psoriasis",
    "narcolepsy": "sleep disorders",
    "glioblastoma": "brain tumor",
    "glioma": "brain tumor",
    "crohn disease": "inflammatory bowel disease",
    "crohn's disease": "inflammatory bowel disease",
    "ulcerative colitis": "inflammatory bowel disease",
    "polycystic ovary syndrome": "ovarian disease",
    "obesity": "overweight",
    "alzheimer's disease": "dementia",
    "alzheimer disease": "dementia",
    "major depressive disorder": "depression",
}


def _squash(text: str) -> str:
    text = re.sub(r"\s+", " ", text).strip(" ,;:-")
    return re.sub(r"\s+,", ",", text)


def rule_normalise(raw: str) -> str:
    """The rules' normalised name (lower case, qualifiers stripped, organ kept); never empty."""
    original = _squash(raw)
    text = original
    genes = _GENETIC[1]
    text = re.sub(genes, " ", text)
    text = text.lower()
    for pattern in _STAGING + _SUBTYPE + _AETIOLOGY + _GENETIC[:1]:
        text = re.sub(pattern, " ", text, flags=re.IGNORECASE)
    text = _squash(text)
    # "narcolepsy-cataplexy syndrome" -> "narcolepsy": a hyphenated pair whose first part names a disease.
    m = re.fullmatch(r"([a-z]+)-([a-z]+) (syndrome|disease|disorder)", text)
    if m and _DISEASE_SUFFIX.search(m.group(1)):
        text = m.group(1)
    return text if text and text not in BROADENING_BLOCKLIST else original.lower()


def is_staging_qualifier(word: str) -> bool:
    """Whether the rules strip ``word`` from a disease name as staging or severity ("severe", "metastatic")."""
    return any(re.fullmatch(p, word, flags=re.IGNORECASE) for p in _STAGING)


def with_synonym(term: str, synonym: str | None) -> str:
    if synonym and synonym.lower() != term.lower():
        return f"{term} OR {synonym}"
    return term


def rule_synonym(term: str) -> str | None:
    return SYNONYMS.get(term.lower())


def rule_broader(term: str) -> str | None:
    """One broader term that keeps the organ: a known parent, else the name without its first word."""
    t = term.lower()
    if t in PARENTS:
        return PARENTS[t]
    words = t.split()
    if len(words) >= 3:
        return " ".join(words[1:])
    return None


def is_blocked(term: str) -> bool:
    """Over-generic: the term, or each of its OR-ed alternatives, is a blocklisted word."""
    parts = [p.strip().lower() for p in re.split(r"\bOR\b", term, flags=re.IGNORECASE) if p.strip()]
    return not parts or all(p in BROADENING_BLOCKLIST for p in parts)


def search_clause(term: str) -> str:
    """``term`` as an E-utilities clause: OR-ed alternatives in parentheses, each quoted if multi-word."""
    parts = [p.strip() for p in re.split(r"\s+OR\s+", term) if p.strip()]
    quoted = [f'"{p}"' if " " in p and not p.startswith('"') else p for p in parts]
    return quoted[0] if len(quoted) == 1 else "(" + " OR ".join(quoted) + ")"


def drug_disease_query(drug: str, term: str) -> str:
    d = drug.strip()
    return f"{search_clause(d)} AND {search_clause(term)}"


@dataclass
class NormalisedDisease:
    original: str
    normalised: str
    synonym: str | None
    search_term: str
    """What is searched: the normalised name OR its synonym (or the broader term when one was taken)."""
    count: int | None = None
    broader: str | None = None
    broader_count: int | None = None
    broadened: bool = False
    method: str = "rules"
    notes: list[str] = field(default_factory=list)


class DiseaseNormalizer:
    def __init__(
        self,
        llm: WorkflowLlm,
        cache: Cache,
        counter: Counter | None,
        *,
        min_results: int = 3,
        ttl_s: float = 5 * 24 * 3600,
    ):
        self.llm = llm
        self.cache = cache
        self.counter = counter
        self.min_results = min_results
        self.ttl_s = ttl_s

    async def _normalise(self, disease: str) -> tuple[dict[str, Any], str]:
        async def make() -> dict[str, Any] | None:
            data = await self.llm.step("normalise_disease", {"disease": disease})
            term = str((data or {}).get("term") or "").strip().lower()
            if data is not None and 0 < len(term) <= 200 and not is_blocked(term):
                syn = data.get("synonym")
                syn = str(syn).strip() if isinstance(syn, str) and 0 < len(syn.strip()) <= 200 else None
                return {"term": term, "synonym": syn, "method": "llm"}
            term = rule_normalise(disease)
            return {"term": term, "synonym": rule_synonym(term), "method": "rules"}

        value, hit = await cached(self.cache, "disease_norm", cache_key(disease), self.ttl_s, make)
        return dict(value), ("cache" if hit else str(value["method"]))

    async def count(self, query: str) -> int | None:
        if self.counter is None:
            return None
        counter = self.counter

        async def make() -> int | None:
            return await counter(query)

        value, _ = await cached(self.cache, "pubmed_count", cache_key(query), self.ttl_s, make)
        return None if value is None else int(value)

    async def _broader(self, drug: str, term: str) -> str | None:
        async def make() -> dict[str, Any] | None:
            data = await self.llm.step("broader_disease", {"drug": drug, "term": term, "minimum": self.min_results})
            broader = str((data or {}).get("term") or "").strip().lower()
            if 0 < len(broader) <= 200:
                return {"term": broader}
            rule = rule_broader(term)
            return {"term": rule} if rule else {"term": ""}

        value, _ = await cached(self.cache, "disease_broader", cache_key(term), self.ttl_s, make)
        return str(value["term"]) or None

    async def normalise(self, disease: str, drug: str | None = None) -> NormalisedDisease:
        data, method = await self._normalise(disease)
        term, synonym = str(data["term"]), data.get("synonym")
        out = NormalisedDisease(disease, term, synonym, with_synonym(term, synonym), method=method)
        out.notes.append(f"normalised {disease!r} -> {out.search_term!r} ({method})")
        if not drug or self.counter is None:
            if drug:
                out.notes.append("no PubMed count available: the term is not verified")
            return out
        out.count = await self.count(drug_disease_query(drug, out.search_term))
        if out.count is None:
            out.notes.append("PubMed count unavailable: the term is not verified")
            return out
        out.notes.append(f"{drug} AND {out.search_term}: {out.count} PubMed hits")
        if out.count >= self.min_results:
            return out
        broader = await self._broader(drug, term)
        if broader is None:
            out.notes.append(f"fewer than {self.min_results} hits and no broader term")
            return out
        out.broader = broader
        if is_blocked(broader):
            out.notes.append(f"broader term {broader!r} is over-generic (blocklist): kept {out.search_term!r}")
            return out
        out.broader_count = await self.count(drug_disease_query(drug, broader))
        if out.broader_count is not None and out.broader_count >= self.min_results:
            out.broadened = True
            out.search_term = broader
            out.notes.append(f"broadened to {broader!r}: {out.broader_count} hits")
        else:
            out.notes.append(f"broader term {broader!r} has {out.broader_count} hits: kept {out.search_term!r}")
        return out
