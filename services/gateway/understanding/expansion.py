"""PubMed search-term expansion over five axes, with per-axis caps (5-10 queries in all).

Axes: ``drug`` (the drug name), ``class_organ`` (drug class from the ATC descriptions + organ),
``mechanism_organ`` (mechanism of action + organ), ``target_gene`` (target gene symbol + disease) and
``synonym`` (a drug synonym + disease). The organ term is extracted first ("obesity" -> "adipose
tissue"; "non-small cell lung cancer" -> "lung"). Claude writes the queries when a key is set (the caps
and the total are enforced on what it returns); the rules build them from the :class:`DrugProfile`
otherwise. Both the organ term and the queries are cached.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from services.gateway.intelligence.cache import Cache, cache_key, cached
from services.gateway.intelligence.llm import WorkflowLlm
from services.gateway.understanding.disease import search_clause

Axis = Literal["drug", "class_organ", "mechanism_organ", "target_gene", "synonym"]
AXES: tuple[Axis, ...] = ("drug", "class_organ", "mechanism_organ", "target_gene", "synonym")
AXIS_CAPS: dict[Axis, int] = {"drug": 3, "class_organ": 2, "mechanism_organ": 2, "target_gene": 2, "synonym": 2}
MIN_QUERIES = 5
MAX_QUERIES = 10


class DrugProfile(BaseModel):
    """A flat, LLM-facing description of a drug (``DrugProfile``)."""

    model_config = ConfigDict(extra="forbid")

    name: str | None = Field(None, max_length=200, description="Drug name (default: the request's drug).")
    synonyms: list[str] = Field(default_factory=list, max_length=50, description="Other names, brand names.")
    target_gene_symbols: list[str] = Field(default_factory=list, max_length=50, description="e.g. SLC6A3.")
    mechanisms_of_action: list[str] = Field(
        default_factory=list, max_length=20, description="e.g. dopamine transporter inhibitor."
    )
    atc_codes: list[str] = Field(default_factory=list, max_length=20, description="e.g. N06AX12.")
    atc_descriptions: list[str] = Field(default_factory=list, max_length=20, description="e.g. Other antidepressants.")
    drug_type: str | None = Field(None, max_length=100, description="e.g. small molecule, antibody.")


# Organ words: the first match (longest keys first) names the organ of a disease.
ORGANS: dict[str, str] = {
    "lung": "lung",
    "pulmonary": "lung",
    "respiratory": "lung",
    "bronch": "lung",
    "asthma": "lung",
    "copd": "lung",
    "liver": "liver",
    "hepat": "liver",
    "biliary": "liver",
    "kidney": "kidney",
    "renal": "kidney",
    "nephr": "kidney",
    "heart": "heart",
    "cardi": "heart",
    "coronary": "heart",
    "myocard": "heart",
    "atrial": "heart",
    "brain": "brain",
    "cerebr": "brain",
    "neuro": "brain",
    "alzheimer": "brain",
    "parkinson": "brain",
    "dementia": "brain",
    "narcolep": "brain",
    "epilep": "brain",
    "migraine": "brain",
    "depress": "brain",
    "schizo": "brain",
    "skin": "skin",
    "derm": "skin",
    "eczema": "skin",
    "psoria": "skin",
    "melanoma": "skin",
    "breast": "breast",
    "colon": "colon",
    "colorectal": "colon",
    "bowel": "intestine",
    "crohn": "intestine",
    "intestin": "intestine",
    "gastr": "stomach",
    "stomach": "stomach",
    "pancrea": "pancreas",
    "diabet": "pancreas",
    "prostat": "prostate",
    "ovar": "ovary",
    "uter": "uterus",
    "bone": "bone",
    "osteo": "bone",
    "arthritis": "joint",
    "joint": "joint",
    "retin": "eye",
    "ocular": "eye",
    "eye": "eye",
    "glaucoma": "eye",
    "thyroid": "thyroid",
    "leuk": "blood",
    "lymphoma": "lymph node",
    "anemi": "blood",
    "anaemi": "blood",
    "blood": "blood",
    "obes": "adipose tissue",
    "adipos": "adipose tissue",
    "overweight": "adipose tissue",
    "muscle": "muscle",
    "myopath": "muscle",
    "bladder": "bladder",
    "esophag": "esophagus",
    "oesophag": "esophagus",
    "hypertens": "blood vessels",
    "vascular": "blood vessels",
    "malaria": "blood",
}


def rule_organ(disease: str) -> str | None:
    text = disease.lower()
    for key in sorted(ORGANS, key=len, reverse=True):
        if key in text:
            return ORGANS[key]
    return None


def _drug_class(description: str) -> str:
    """ "Other antidepressants" -> "antidepressants"; "HMG CoA reductase inhibitors" unchanged."""
    return re.sub(r"^(?:other|various|combinations of)\s+", "", description.strip(), flags=re.IGNORECASE).lower()


@dataclass(frozen=True)
class SearchQuery:
    axis: Axis
    query: str


def enforce_caps(queries: list[SearchQuery]) -> list[SearchQuery]:
    """At most :data:`AXIS_CAPS` per axis and :data:`MAX_QUERIES` in all, without repeats, in order."""
    out: list[SearchQuery] = []
    seen: set[str] = set()
    per_axis: dict[str, int] = {}
    for q in queries:
        text = re.sub(r"\s+", " ", q.query).strip()
        key = text.lower()
        if not text or len(text) > 500 or key in seen or per_axis.get(q.axis, 0) >= AXIS_CAPS[q.axis]:
            continue
        seen.add(key)
        per_axis[q.axis] = per_axis.get(q.axis, 0) + 1
        out.append(SearchQuery(q.axis, text))
        if len(out) == MAX_QUERIES:
            break
    return out


def fill(queries: list[SearchQuery], extra: list[SearchQuery]) -> list[SearchQuery]:
    """``queries`` topped up to :data:`MIN_QUERIES` from ``extra``: within the caps first, then beyond them."""
    out = enforce_caps([*queries, *extra])
    for q in extra:
        if len(out) >= MIN_QUERIES:
            break
        if q.query.lower() not in {o.query.lower() for o in out}:
            out.append(q)
    return out


def rule_queries(drug: str, disease_term: str, organ: str | None, profile: DrugProfile) -> list[SearchQuery]:
    """Queries from the profile, capped per axis; padded to 5 with drug-axis variants."""
    d, dis = search_clause(drug), search_clause(disease_term)
    place = search_clause(organ) if organ else dis
    qs: list[SearchQuery] = [SearchQuery("drug", f"{d} AND {dis}")]
    qs += [SearchQuery("class_organ", f"{search_clause(_drug_class(c))} AND {place}") for c in profile.atc_descriptions]
    qs += [
        SearchQuery("mechanism_organ", f"{search_clause(m.lower())} AND {place}") for m in profile.mechanisms_of_action
    ]
    qs += [SearchQuery("target_gene", f"{g.strip()} AND {dis}") for g in profile.target_gene_symbols if g.strip()]
    qs += [SearchQuery("synonym", f"{search_clause(s)} AND {dis}") for s in profile.synonyms if s.strip()]
    pads = [
        SearchQuery("drug", f"{d} AND {dis} AND (randomized controlled trial[pt] OR meta-analysis[pt])"),
        SearchQuery("drug", f"{d} AND {place}" if organ else f"{d} AND {dis} AND (efficacy OR treatment outcome)"),
        SearchQuery("drug", f"{d}[tiab] AND {dis} AND mechanism"),
    ]
    out = enforce_caps(qs)
    for pad in pads:
        if len(out) >= MIN_QUERIES:
            break
        out = enforce_caps([*out, pad])
    if len(out) < MIN_QUERIES:  # every axis full but still short: relax the drug-axis cap for padding
        for pad in [*pads, SearchQuery("drug", f"{d} AND {dis} AND review[pt]")]:
            if len(out) >= MIN_QUERIES:
                break
            if pad.query.lower() not in {q.query.lower() for q in out}:
                out.append(pad)
    return out


@dataclass
class Expansion:
    organ: str | None
    queries: list[SearchQuery]
    method: str
    organ_method: str


class SearchTermExpander:
    def __init__(self, llm: WorkflowLlm, cache: Cache, *, ttl_s: float = 5 * 24 * 3600):
        self.llm = llm
        self.cache = cache
        self.ttl_s = ttl_s

    async def organ(self, disease: str) -> tuple[str | None, str]:
        async def make() -> dict[str, Any]:
            data = await self.llm.step("organ", {"disease": disease})
            organ = str((data or {}).get("organ") or "").strip().lower()
            if 0 < len(organ) <= 60:
                return {"organ": organ, "method": "llm"}
            return {"organ": rule_organ(disease) or "", "method": "rules"}

        value, hit = await cached(self.cache, "organ", cache_key(disease), self.ttl_s, make)
        return (str(value["organ"]) or None), ("cache" if hit else str(value["method"]))

    async def expand(self, drug: str, disease_term: str, profile: DrugProfile) -> Expansion:
        organ, organ_method = await self.organ(disease_term)

        async def make() -> dict[str, Any]:
            data = await self.llm.step(
                "search_terms",
                {
                    "drug": drug,
                    "disease": disease_term,
                    "organ": organ or disease_term,
                    "axes": list(AXES),
                    "caps": dict(AXIS_CAPS),
                    "lo": MIN_QUERIES,
                    "hi": MAX_QUERIES,
                    "profile": profile.model_dump_json(exclude_none=True),
                },
            )
            raw = (data or {}).get("queries")
            got: list[SearchQuery] = []
            if isinstance(raw, list):
                for item in raw:
                    if isinstance(item, dict) and item.get("axis") in AXES and isinstance(item.get("query"), str):
                        got.append(SearchQuery(item["axis"], item["query"]))
            capped = enforce_caps(got)
            method = "llm"
            if len(capped) < MIN_QUERIES:  # too few usable queries: the rules fill up
                method = "llm+rules" if capped else "rules"
                capped = fill(capped, rule_queries(drug, disease_term, organ, profile))
            return {"queries": [{"axis": q.axis, "query": q.query} for q in capped], "method": method}

        key = cache_key(drug, disease_term, profile.model_dump(mode="json"))
        value, hit = await cached(self.cache, "search_terms", key, self.ttl_s, make)
        queries = [SearchQuery(q["axis"], q["query"]) for q in value["queries"]]
        return Expansion(organ, queries, "cache" if hit else str(value["method"]), organ_method)
