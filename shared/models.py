"""Domain models shared by services: what a parsed document, a chunk and a search hit are.

``ParsedDocument`` is also the public output contract of ``evidentia parse`` and the input
contract of the JSON-lines document import (see ``docs/contracts.md``): absent values are
``None`` or empty lists, never missing keys.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal, Self, get_args

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, computed_field, model_validator

from shared import sources

_QUERY_TERM = re.compile(r"\w+")


def query_terms(text: str) -> list[str]:
    """The terms of a query as the term cap (``EVIDENTIA_RETRIEVAL_MAX_QUERY_TERMS``) counts them."""
    return _QUERY_TERM.findall(text)


def truncate_terms(text: str, max_terms: int) -> str:
    """``text`` up to the end of its ``max_terms``-th term (unchanged when it has no more)."""
    for i, match in enumerate(_QUERY_TERM.finditer(text), start=1):
        if i == max_terms:
            return text[: match.end()]
    return text


#: The most characters of a query searched (a request's ``query``/``question`` ``max_length``). With the term cap
#: (``EVIDENTIA_RETRIEVAL_MAX_QUERY_TERMS``) it bounds what one search reads: :func:`check_query_length` refuses
#: more (the gateway: 422), :func:`cap_query` cuts to it (the retriever, for a request that reached it anyway).
MAX_QUERY_CHARS = 10_000


def check_query_length(text: str, what: str, max_terms: int) -> None:
    """Refuse a query, a question or a query form's rendered text with more than ``max_terms`` terms or
    :data:`MAX_QUERY_CHARS` characters: a ``ValueError`` naming ``what`` and the limit."""
    n = len(query_terms(text))
    if n > max_terms:
        raise ValueError(
            f"{what} has {n} terms; at most {max_terms} are searched (EVIDENTIA_RETRIEVAL_MAX_QUERY_TERMS): "
            "shorten it to the question or the key terms"
        )
    if len(text) > MAX_QUERY_CHARS:
        raise ValueError(f"{what} has {len(text)} characters; at most {MAX_QUERY_CHARS} are searched")


def cap_query(text: str, max_terms: int) -> str:
    """``text`` cut to the limits :func:`check_query_length` checks (unchanged when within them)."""
    return truncate_terms(text, max_terms)[:MAX_QUERY_CHARS]


Source = Literal["pubmed", "pmc", "bookshelf", "clinicaltrials", "fda_label"]
StudyType = Literal[
    "meta-analysis",
    "systematic-review",
    "randomized-controlled-trial",
    "guideline",
    "clinical-trial",
    "cohort",
    "case-control",
    "observational",
    "case-report",
    "review",
    "editorial",
    "other",
]


#: The evidence weight (0-1) of each study type, the one table of it: the parser stores it as a document's
#: ``evidence_level``; ranking and filters read it. Systematic review / meta-analysis 1.0, RCT 0.9, guideline
#: 0.85, cohort 0.7, case report 0.5, expert opinion (review, editorial) 0.3; the other types sit where the
#: order of strength puts them.
EVIDENCE_WEIGHTS: dict[StudyType, float] = {
    "meta-analysis": 1.0,
    "systematic-review": 1.0,
    "randomized-controlled-trial": 0.9,
    "guideline": 0.85,
    "clinical-trial": 0.8,
    "cohort": 0.7,
    "case-control": 0.7,
    "observational": 0.7,
    "other": 0.5,  # the weight of an unknown type
    "case-report": 0.5,
    "review": 0.3,
    "editorial": 0.3,
}

#: The weight a source with no stored evidence weight counts as (that of an unknown type, ``other``): ranking
#: by evidence neither lifts nor lowers it.
NEUTRAL_EVIDENCE_WEIGHT = EVIDENCE_WEIGHTS["other"]

#: Evidence levels 1 (strongest) to 5 (the design notes' ``QueryInput.min_evidence_level``) as the lowest
#: stored evidence weight each admits: 1 systematic review / meta-analysis (1.0), 2 randomised controlled trial
#: (0.9), 3 other trials, guidelines, cohort, case-control and observational studies (0.7), 4 case reports and
#: unclassified sources (0.5), 5 expert opinion, reviews and editorials: everything (0.0).
EVIDENCE_LEVEL_MIN_WEIGHT: dict[int, float] = {
    1: EVIDENCE_WEIGHTS["meta-analysis"],
    2: EVIDENCE_WEIGHTS["randomized-controlled-trial"],
    3: EVIDENCE_WEIGHTS["cohort"],
    4: EVIDENCE_WEIGHTS["case-report"],
    5: 0.0,
}


def evidence_level_weight(level: int) -> float:
    """Takes an evidence level 1 (strongest) .. 5 and returns the lowest evidence weight (0-1) it admits, so
    "at least level ``n``" is the filter ``min_evidence_level = evidence_level_weight(n)`` on the stored
    weights. Raises ValueError for a level outside 1-5."""
    if level not in EVIDENCE_LEVEL_MIN_WEIGHT:
        raise ValueError(f"evidence level must be 1 (strongest) to 5, not {level}")
    return EVIDENCE_LEVEL_MIN_WEIGHT[level]


def evidence_level_of(weight: float | None) -> int:
    """Takes a stored evidence weight (None: unknown) and returns its evidence level, 1 (strongest) .. 5: the
    strongest level whose lowest weight it reaches (unknown counts as the neutral weight, level 4). The store
    keeps weights as ``real`` (0.9 reads back as 0.8999999762), so a weight within 1e-6 of a bound reaches it."""
    w = NEUTRAL_EVIDENCE_WEIGHT if weight is None else weight
    return next(level for level, low in sorted(EVIDENCE_LEVEL_MIN_WEIGHT.items()) if w >= low - 1e-6)


SearchMode = Literal["dense", "lexical", "hybrid", "hybrid+rerank"]
"""How a search ranks: by meaning (dense), by words (lexical, BM25), both fused (hybrid), then reranked."""


def document_id(source: str, source_id: str) -> str:
    """Stable id of a document across every topic and table: ``pubmed:12345``, ``pmc:PMC123``."""
    return f"{source}:{source_id}"


class Author(BaseModel):
    last_name: str | None = None
    fore_name: str | None = None
    initials: str | None = None
    collective_name: str | None = None
    affiliations: list[str] = Field(default_factory=list)

    @property
    def display(self) -> str:
        if self.collective_name:
            return self.collective_name
        return " ".join(p for p in (self.last_name, self.initials) if p) or ""


class Journal(BaseModel):
    title: str | None = None
    iso_abbrev: str | None = None
    volume: str | None = None
    issue: str | None = None
    pages: str | None = None


class MeshHeading(BaseModel):
    descriptor: str
    qualifiers: list[str] = Field(default_factory=list)
    major: bool = False


class AbstractSection(BaseModel):
    label: str | None = None
    category: str | None = None
    text: str


class Section(BaseModel):
    """A section of ``full_text``: ``full_text[char_start:char_end]`` is its text."""

    title: str
    char_start: int
    char_end: int


class Chunk(BaseModel):
    section: str | None = None
    ordinal: int
    text: str
    token_count: int
    char_start: int
    char_end: int


#: Document priorities (seed 003): a document at 0 is never returned by search.
PRIORITY_EXCLUDED, PRIORITY_LOW, PRIORITY_NORMAL, PRIORITY_HIGH = 0, 10, 50, 100


#: Words naming a salt or hydrate form: a drug label's substance without them is its active moiety's name.
SALT_WORDS = frozenset(
    [
        "sodium",
        "potassium",
        "calcium",
        "magnesium",
        "hydrochloride",
        "hcl",
        "sulfate",
        "bisulfate",
        "maleate",
        "besylate",
        "mesylate",
        "tartrate",
        "succinate",
        "citrate",
        "acetate",
        "phosphate",
        "bromide",
        "chloride",
        "fumarate",
        "hyclate",
        "monohydrate",
        "dihydrate",
        "trihydrate",
        "anhydrous",
        "hydrobromide",
        "nitrate",
        "lactate",
    ]
)


class DrugLabel(BaseModel):
    """What identifies a drug label (an FDA Structured Product Label) beyond its set id (the document's
    ``source_id``): its ``version`` (a new version of a set replaces the stored one), when it took effect, and
    the drug it is for, by name and RxNorm concept, so a search can keep to one drug's labels (the ``drugs``
    filter matches :attr:`match_terms`)."""

    model_config = ConfigDict(extra="ignore")

    version: int | None = Field(None, ge=0, description="The label's version within its set.")
    label_id: str | None = Field(None, description="The id of this version of the label (openFDA `id`).")
    effective_time: str | None = Field(None, description="When this version took effect (YYYYMMDD).")
    generic_names: list[str] = Field(default_factory=list)
    brand_names: list[str] = Field(default_factory=list)
    substance_names: list[str] = Field(default_factory=list)
    rxcuis: list[str] = Field(default_factory=list, description="RxNorm concepts of the labelled products.")
    pharm_classes: list[str] = Field(
        default_factory=list, description="Established pharmacologic classes (`Anticoagulant [EPC]`)."
    )

    @computed_field  # type: ignore[prop-decorator]
    @property
    def match_terms(self) -> list[str]:
        """Every name (lower case, also without its salt: ``warfarin sodium`` -> ``warfarin``) and RxCUI the label
        is for: what the ``drugs`` search filter matches."""
        names = {n.strip().lower() for n in (*self.generic_names, *self.brand_names, *self.substance_names)}
        bases = {" ".join(w for w in n.split() if w not in SALT_WORDS) for n in names}
        return sorted({n for n in names | bases if n} | {r.strip() for r in self.rxcuis if r.strip()})


TrialPhase = Literal["EARLY_PHASE1", "PHASE1", "PHASE2", "PHASE3", "PHASE4", "NA"]
"""A trial's phase as ClinicalTrials.gov writes it (``designModule.phases``; ``NA``: not applicable)."""
TrialStatus = Literal[
    "NOT_YET_RECRUITING",
    "RECRUITING",
    "ENROLLING_BY_INVITATION",
    "ACTIVE_NOT_RECRUITING",
    "SUSPENDED",
    "TERMINATED",
    "COMPLETED",
    "WITHDRAWN",
    "UNKNOWN",
    "AVAILABLE",
    "NO_LONGER_AVAILABLE",
    "TEMPORARILY_NOT_AVAILABLE",
    "APPROVED_FOR_MARKETING",
    "WITHHELD",
]
"""A study's overall recruitment status as ClinicalTrials.gov writes it (``statusModule.overallStatus``)."""
TRIAL_PHASES: tuple[str, ...] = get_args(TrialPhase)
TRIAL_STATUSES: tuple[str, ...] = get_args(TrialStatus)


class TrialFacts(BaseModel):
    """What a registered trial is, beside its text: what the trial filters select on and answers show."""

    model_config = ConfigDict(extra="ignore")

    phases: list[TrialPhase] = Field(default_factory=list, description="Its phases (two for a phase 2/3 trial).")
    status: TrialStatus | None = Field(None, description="Its overall recruitment status.")
    has_results: bool = Field(False, description="Results are posted at the registry.")
    study_type: str | None = Field(None, description="INTERVENTIONAL, OBSERVATIONAL or EXPANDED_ACCESS.")
    enrollment: int | None = Field(None, ge=0, description="Participants enrolled (actual) or planned.")
    start_date: str | None = None
    completion_date: str | None = None
    conditions: list[str] = Field(default_factory=list)
    interventions: list[str] = Field(default_factory=list)


class ParsedDocument(BaseModel):
    model_config = ConfigDict(extra="ignore")

    source: Source = "pubmed"
    source_id: str
    pmid: str | None = None
    pmcid: str | None = None
    doi: str | None = None
    pii: str | None = Field(None, description="Publisher item identifier (PubMed ArticleIdList), if any.")
    title: str = ""
    abstract: str | None = None
    abstract_sections: list[AbstractSection] = Field(default_factory=list)
    authors: list[Author] = Field(default_factory=list)
    journal: Journal = Field(default_factory=Journal)
    pub_date: str | None = None
    year: int | None = None
    language: str | None = None
    publication_types: list[str] = Field(default_factory=list)
    study_type: StudyType | None = None
    evidence_level: float | None = None
    mesh: list[MeshHeading] = Field(default_factory=list)
    keywords: list[str] = Field(default_factory=list)
    chemicals: list[str] = Field(default_factory=list)
    retracted: bool = False
    full_text: str | None = None
    sections: list[Section] = Field(default_factory=list)
    references: list[str] = Field(default_factory=list, description="PMIDs this document cites.")
    trial: TrialFacts | None = Field(None, description="A registered trial's phase, status and results (else none).")
    chunks: list[Chunk] = Field(default_factory=list)
    drug_label: DrugLabel | None = Field(None, description="A drug label's version and drug (its source's documents).")
    priority: int | None = Field(
        None,
        ge=PRIORITY_EXCLUDED,
        le=PRIORITY_HIGH,
        description=(
            "Search priority (seed 003): 0 never returned by search, 10 low, 50 normal, 100 high (any 0-100). "
            "Unset: the ingestion job's `priority`, else the stored document's, else 50. Not part of the content: "
            "a change of priority alone does not re-chunk or re-embed."
        ),
    )

    @property
    def document_id(self) -> str:
        return document_id(self.source, self.source_id)

    def content_hash(self) -> str:
        """Hash of everything that shapes the stored text and metadata (not the chunks)."""
        # ``trial`` only where there is one, so the hashes of every other document stay what they were.
        payload = self.model_dump_json(exclude={"chunks", "priority", *(["trial"] if self.trial is None else [])})
        return hashlib.sha256(payload.encode()).hexdigest()

    @property
    def url(self) -> str | None:
        """The document's link, by its source's rule (:func:`shared.sources.record_url`)."""
        return sources.record_url(self.source, self.source_id, self.pmid, self.pmcid)


class CitationMetrics(BaseModel):
    """A paper's citation metrics from the NIH iCite database snapshot (``evidentia import icite FILE``), joined
    to the document by PMID. Each value is as the snapshot row gave it (None where its field was blank)."""

    citation_count: int | None = Field(None, ge=0, description="Times the paper has been cited (iCite's count).")
    relative_citation_ratio: float | None = Field(
        None,
        description="Relative Citation Ratio: citations per year against NIH-funded papers of the same field and "
        "year (median 1.0; 2.0 = twice as cited). Blank in iCite for papers too new to have one.",
    )
    nih_percentile: float | None = Field(
        None, ge=0, le=100, description="Percentile of the RCR among NIH-funded papers (99 = top 1 %)."
    )
    year: int | None = Field(None, description="Publication year as the iCite row gives it.")
    provisional: bool | None = Field(
        None, description="The RCR is provisional (a paper of the last two years, RCR from few citations)."
    )


@dataclass(frozen=True)
class CliFlag:
    """A filter's option in ``evidentia search`` and ``evidentia ask`` (metadata of its :class:`SearchFilters`
    field: the CLI builds its options and the request's filters from these)."""

    flag: str
    metavar: str | None = None
    help: str | None = None


#: A drug as the ``drugs`` filter takes it: a name (compared in lower case) or an RxCUI.
DrugTerm = Annotated[str, StringConstraints(strip_whitespace=True, to_lower=True, min_length=1, max_length=200)]


class SearchFilters(BaseModel):
    """Restrictions on what a search may return."""

    model_config = ConfigDict(extra="forbid")

    year_from: Annotated[int | None, CliFlag("--year-from")] = Field(
        None, ge=1800, le=2100, description="Earliest publication year."
    )
    year_to: Annotated[int | None, CliFlag("--year-to")] = Field(
        None, ge=1800, le=2100, description="Latest publication year."
    )
    journals: list[str] = Field(default_factory=list, description="Journal titles or ISO abbreviations.")
    study_types: list[StudyType] = Field(default_factory=list, description="Only these study types.")
    min_evidence_level: float | None = Field(None, ge=0, le=1, description="Lowest evidence weight (0..1).")
    mesh: list[str] = Field(default_factory=list, description="MeSH descriptors, any of which must match.")
    mesh_descendants: bool = Field(
        True,
        description=(
            "A MeSH descriptor also matches its descendants in the MeSH tree (where the tree is loaded into "
            "the store's `mesh_tree` table; otherwise only the named descriptors match)."
        ),
    )
    sources: list[Source] = Field(
        default_factory=list, description="pubmed, pmc, bookshelf, clinicaltrials and/or fda_label."
    )
    trial_phase: list[TrialPhase] = Field(
        default_factory=list,
        description=(
            "Only registered trials (ClinicalTrials.gov) in any of these phases (`PHASE1`..`PHASE4`, `EARLY_PHASE1`, "
            "`NA`; a phase 2/3 trial is in both). A document that is no trial fails this filter."
        ),
    )
    trial_status: list[TrialStatus] = Field(
        default_factory=list,
        description=(
            "Only registered trials of any of these overall statuses (`RECRUITING`, `COMPLETED`, ...). A document "
            "that is no trial fails this filter."
        ),
    )
    has_results: bool | None = Field(
        None,
        description=(
            "true: only registered trials with results posted; false: only trials without. Unset: any document."
        ),
    )
    include_retracted: bool = Field(False, description="Retracted papers are excluded unless this is true.")
    min_priority: int | None = Field(
        None,
        ge=1,
        le=PRIORITY_HIGH,
        description="Lowest document priority (10 low, 50 normal, 100 high); priority 0 is never returned anyway.",
    )
    min_citation_count: Annotated[
        int | None,
        CliFlag(
            "--min-citations",
            "N",
            "Only papers cited at least N times (NIH iCite, `evidentia import icite`; papers without metrics fail).",
        ),
    ] = Field(
        None,
        ge=0,
        description=(
            "Only papers cited at least this many times (NIH iCite `citation_count`, loaded by `evidentia import "
            "icite`). A document without iCite metrics (no PMID, or none imported for it) fails this filter."
        ),
    )
    min_nih_percentile: Annotated[
        float | None,
        CliFlag(
            "--min-percentile",
            "P",
            "Only papers at or above NIH percentile P, 0-100 (iCite; papers without metrics fail).",
        ),
    ] = Field(
        None,
        ge=0,
        le=100,
        description=(
            "Only papers at or above this NIH percentile of their Relative Citation Ratio (iCite `nih_percentile`, "
            "0-100; 90 = the top 10 %). A document without iCite metrics, or whose percentile is blank in iCite, "
            "fails this filter."
        ),
    )
    sections: list[Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=200)]] = Field(
        default_factory=list,
        max_length=20,
        description=(
            "Only passages from these sections, any of which must match, e.g. `Results`, `Conclusions`. A passage's "
            "section is its heading path (`Methods > Statistical analysis`; guidelines `Book > Chapter > "
            "Section`); it matches a name when any heading on the path does, also one of two joined headings "
            "(`Materials and Methods` matches `Methods`), regardless of case, numbering and a plural `s`. "
            "PubMed records have one section, `Abstract`."
        ),
    )
    max_chunks_per_document: int | None = Field(None, ge=1, description="At most this many passages a paper.")
    drugs: list[DrugTerm] = Field(
        default_factory=list,
        max_length=20,
        description=(
            "Only drug labels for these drugs, any of which must match: generic, brand or substance names "
            "(any case) or RxNorm concept ids (RxCUIs). Documents that are not drug labels never match."
        ),
    )


#: The therapeutic-intent query: what a ``therapeutic`` :class:`QueryForm` embeds and tells a reranker.
THERAPEUTIC_TEMPLATE = (
    "Evidence for {drug} as a treatment for {disease}, including clinical trials, efficacy data, "
    "and mechanism of action"
)


#: The kinds of clinical finding a consultation interview yields (``POST /v1/guidelines/consult``): the
#: synthesizer's ``extract_findings`` step and the gateway's offline rules both use exactly these.
ClinicalFindingType = Literal["symptom", "sign", "history", "medication", "allergy", "pregnancy", "age", "vital"]
CLINICAL_FINDING_TYPES: tuple[str, ...] = get_args(ClinicalFindingType)


def finding_text(kind: str, value: str) -> str:
    """Takes a clinical finding's kind and value and returns it as a condition-findings query writes it,
    ``"symptom: fever 3 days"`` (kind lower-cased, spaces as ``_``); just the value when the kind is blank."""
    kind = kind.strip().lower().replace(" ", "_")
    return f"{kind}: {value.strip()}" if kind else value.strip()


def _sentence(text: str) -> str:
    text = text.strip()
    return text if text.endswith((".", "?", "!")) else f"{text}."


class QueryForm(BaseModel):
    """A structured query, rendered once for every service: the text the gateway shows is the text the
    retriever embeds and gives its reranker; lexical search matches the form's terms.

    ``therapeutic``: "Evidence for {drug} as a treatment for {disease}, including clinical trials, efficacy
    data, and mechanism of action" (drug and disease matched). ``condition-findings``: "{condition}.
    {finding}. {finding}." where a finding reads like "symptom: fever 3 days" (the condition and the
    findings' values matched).
    """

    model_config = ConfigDict(extra="forbid")

    kind: Literal["therapeutic", "condition-findings"] = Field(description="Which template.")
    drug: str | None = Field(None, max_length=500, description="Drug (therapeutic).")
    disease: str | None = Field(None, max_length=500, description="Disease or indication (therapeutic).")
    condition: str | None = Field(None, max_length=500, description="Condition or diagnosis (condition-findings).")
    findings: list[str] = Field(
        default_factory=list,
        max_length=50,
        description='Clinical findings, e.g. "symptom: fever 3 days", "medical_history: pregnant".',
    )

    @model_validator(mode="after")
    def _complete(self) -> QueryForm:
        if self.kind == "therapeutic" and not (self.drug and self.disease):
            raise ValueError("a therapeutic query needs both drug and disease")
        if self.kind == "condition-findings" and not self.condition:
            raise ValueError("a condition-findings query needs a condition")
        return self

    @classmethod
    def condition_findings(cls, condition: str, findings: Sequence[str], population: str | None = None) -> QueryForm:
        """Takes a condition, its findings (as :func:`finding_text` writes them) and an optional population
        (added as the finding "population: ..."); returns their form, cut to its limits (condition 500
        characters, 50 findings)."""
        extra = [finding_text("population", population)] if population and population.strip() else []
        return cls(kind="condition-findings", condition=condition.strip()[:500], findings=[*findings, *extra][:50])

    def text(self) -> str:
        """The query as text: the therapeutic intent, or the condition and each non-blank finding as sentences."""
        if self.kind == "therapeutic":
            return THERAPEUTIC_TEMPLATE.format(drug=(self.drug or "").strip(), disease=(self.disease or "").strip())
        return " ".join([_sentence(self.condition or "")] + [_sentence(f) for f in self.findings if f.strip()])

    def keywords(self) -> str:
        """The terms a lexical search matches: drug and disease, or the condition and findings."""
        if self.kind == "therapeutic":
            return f"{self.drug} {self.disease}"
        values = [f.split(":", 1)[1].strip() if ":" in f else f.strip() for f in self.findings]
        return " ".join([self.condition or "", *values]).strip()

    def check_length(self, max_terms: int, what: str = "query_form") -> None:
        """Refuse the form when what it renders to (:meth:`text`, :meth:`keywords`) is longer than a query may be
        (:func:`check_query_length`): the schema bounds each field, not their sum."""
        for text in (self.text(), self.keywords()):
            check_query_length(text, f"{what} (as searched)", max_terms)


#: How many candidates a search keeps after the fusion (``top_k``) and how many passages it returns (``top_n``):
#: the limits every request that searches shares. A search returns up to :data:`MAX_TOP_N` passages; an answer
#: (ask, the workflows) reads at most :data:`MAX_ANSWER_TOP_N` of them.
DEFAULT_TOP_K = 20
DEFAULT_TOP_N = 5
MAX_TOP_K = 200
MAX_TOP_N = 100
MAX_ANSWER_TOP_N = 20
TopK = Annotated[int, Field(ge=1, le=MAX_TOP_K)]
TopN = Annotated[int, Field(ge=1, le=MAX_TOP_N)]
AnswerTopN = Annotated[int, Field(ge=1, le=MAX_ANSWER_TOP_N)]
RerankerChoice = Literal["auto", "none", "cross-encoder", "llm"]


def described(descriptions: dict[str, str]) -> Callable[[dict[str, Any]], None]:
    """A ``json_schema_extra`` that gives the named properties these descriptions: how one contract that shares
    :class:`SearchParameters` documents them to its readers, without declaring the fields again."""

    def extra(schema: dict[str, Any]) -> None:
        for name, text in descriptions.items():
            schema["properties"][name]["description"] = text

    return extra


class SearchParameters(BaseModel):
    """What a search asks, declared once for the HTTP search request (``POST /v1/search``) and the Kafka
    retrieval request (:class:`shared.events.RetrievalRequest`); each documents the fields to its own readers
    (:func:`described`)."""

    query: str | None = Field(None, min_length=1, max_length=MAX_QUERY_CHARS)
    query_form: QueryForm | None = None
    top_k: TopK = DEFAULT_TOP_K
    top_n: TopN = DEFAULT_TOP_N
    mode: SearchMode = "hybrid"
    reranker: RerankerChoice | None = None
    mmr: bool = False
    mmr_lambda: float | None = Field(None, ge=0, le=1)
    filters: SearchFilters = Field(default_factory=SearchFilters)
    ef_search: int | None = Field(None, ge=1, le=1000)

    @model_validator(mode="after")
    def _has_query(self) -> Self:
        if self.query is None and self.query_form is None:
            raise ValueError("give a query or a query_form")
        return self


class SearchHit(BaseModel):
    """One retrieved passage with the metadata needed to cite it."""

    chunk_id: str
    document_id: str
    source: Source
    source_id: str
    pmid: str | None = None
    pmcid: str | None = None
    doi: str | None = None
    title: str
    journal: str | None = None
    year: int | None = None
    study_type: str | None = None
    evidence_level: float | None = None
    priority: int | None = Field(None, description="The document's search priority (50 normal).")
    citation_metrics: CitationMetrics | None = Field(
        None,
        description="The paper's NIH iCite citation metrics, when imported for its PMID (`evidentia import icite`).",
    )
    section: str | None = None
    text: str
    char_start: int | None = Field(
        None, ge=0, description="Where `text` starts in its document's full text (None: not known)."
    )
    score: float
    dense_score: float | None = None
    lexical_score: float | None = None
    rerank_score: float | None = Field(None, description="The reranker's score, where one reranked the hit.")
    rank: int
    url: str | None = None

    @property
    def citation_id(self) -> str:
        """The id an answer cites this passage by, by its source's rule (:func:`shared.sources.citation_id`)."""
        return sources.citation_id(self.source, self.source_id, self.pmid, self.pmcid)


def evidence_weight_of(hit: SearchHit) -> float:
    """A hit's evidence weight for ordering: its stored ``evidence_level``, else :data:`NEUTRAL_EVIDENCE_WEIGHT`."""
    return NEUTRAL_EVIDENCE_WEIGHT if hit.evidence_level is None else hit.evidence_level


def strongest_evidence_first(hits: Sequence[SearchHit]) -> list[SearchHit]:
    """How an answer lists its retrieved sources: takes ``hits`` and returns them by evidence weight, strongest
    first (unknown counts as :data:`NEUTRAL_EVIDENCE_WEIGHT`), equal weights by retrieval ``rank``, then in
    the order given (the sort is stable). Each hit keeps its ``rank``, the retrieval order."""
    return sorted(hits, key=lambda h: (-evidence_weight_of(h), h.rank))


def relevant_hits(hits: Sequence[SearchHit], min_score: float) -> list[SearchHit]:
    """The relevance threshold, the one rule for what counts as evidence: takes retrieved ``hits`` and the
    threshold (``Settings.relevance_floor``: ``EVIDENTIA_RETRIEVAL_MIN_SCORE``, else the embedding model's own)
    and returns, in order, the hits whose dense (cosine) similarity is at or above it; a hit with no dense score
    (found by the lexical leg alone) is kept. The synthesizer cites only these (none: the insufficient-evidence
    answer); the gateway's guideline route searches every source when no guideline passage is among them."""
    return [h for h in hits if h.dense_score is None or h.dense_score >= min_score]
