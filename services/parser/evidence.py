"""Publication types to a study type and an evidence weight.

Order of strength: meta-analysis and systematic review > randomized controlled trial >
guideline > cohort/observational > case report > review/editorial/comment. The weights
(systematic review / meta-analysis 1.0, RCT 0.9, guideline 0.85, cohort 0.7, case report 0.5, expert
opinion 0.3); the other types sit where the order puts them. When a record has
several types the strongest wins. The weights themselves are ``shared.models.EVIDENCE_WEIGHTS``.
PubMed publication types decide first; MeSH check tags such as
"Cohort Studies" only refine a record whose types say nothing stronger than "Journal Article".
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from shared.models import EVIDENCE_WEIGHTS, StudyType

# Rank used to pick the strongest type (higher wins); "other" loses to everything.
_RANK: dict[StudyType, int] = {
    "meta-analysis": 12,
    "systematic-review": 11,
    "randomized-controlled-trial": 10,
    "guideline": 9,
    "clinical-trial": 8,
    "cohort": 7,
    "case-control": 6,
    "observational": 5,
    "case-report": 4,
    "review": 3,
    "editorial": 2,
    "other": 0,
}

PUBLICATION_TYPES: dict[str, StudyType] = {
    "meta-analysis": "meta-analysis",
    "network meta-analysis": "meta-analysis",
    "systematic review": "systematic-review",
    "randomized controlled trial": "randomized-controlled-trial",
    "randomized controlled trial, veterinary": "randomized-controlled-trial",
    "practice guideline": "guideline",
    "guideline": "guideline",
    "consensus development conference": "guideline",
    "consensus development conference, nih": "guideline",
    "clinical trial": "clinical-trial",
    "clinical trial, phase i": "clinical-trial",
    "clinical trial, phase ii": "clinical-trial",
    "clinical trial, phase iii": "clinical-trial",
    "clinical trial, phase iv": "clinical-trial",
    "controlled clinical trial": "clinical-trial",
    "pragmatic clinical trial": "clinical-trial",
    "equivalence trial": "clinical-trial",
    "adaptive clinical trial": "clinical-trial",
    "clinical trial, veterinary": "clinical-trial",
    "observational study": "observational",
    "observational study, veterinary": "observational",
    "comparative study": "observational",
    "twin study": "observational",
    "multicenter study": "observational",
    "case reports": "case-report",
    "review": "review",
    "scoping review": "review",
    "editorial": "editorial",
    "comment": "editorial",
    "letter": "editorial",
    "news": "editorial",
    "newspaper article": "editorial",
    "interview": "editorial",
    "personal narrative": "editorial",
    "lecture": "editorial",
}

# MeSH check tags / descriptors that describe the design of the study itself.
MESH_DESIGNS: dict[str, StudyType] = {
    "cohort studies": "cohort",
    "prospective studies": "cohort",
    "retrospective studies": "cohort",
    "longitudinal studies": "cohort",
    "follow-up studies": "cohort",
    "case-control studies": "case-control",
    "cross-sectional studies": "observational",
}

# JATS article-type attribute values (PMC) that name a study type.
JATS_ARTICLE_TYPES: dict[str, StudyType] = {
    "systematic-review": "systematic-review",
    "meta-analysis": "meta-analysis",
    "guideline": "guideline",
    "practice-guideline": "guideline",
    "case-report": "case-report",
    "review-article": "review",
    "editorial": "editorial",
    "letter": "editorial",
    "commentary": "editorial",
    "article-commentary": "editorial",
    "reply": "editorial",
}

# Only for PMC articles, which carry no PubMed publication types: what their title says.
_TITLE_PATTERNS: tuple[tuple[re.Pattern[str], StudyType], ...] = (
    (re.compile(r"\bmeta-?analys[ie]s\b", re.I), "meta-analysis"),
    (re.compile(r"\bsystematic (literature )?review\b", re.I), "systematic-review"),
    (re.compile(r"\brandomi[sz]ed\b.{0,60}\btrial\b", re.I), "randomized-controlled-trial"),
    (re.compile(r"\b(practice )?guidelines?\b", re.I), "guideline"),
    (re.compile(r"\bcohort\b", re.I), "cohort"),
    (re.compile(r"\bcase-control\b", re.I), "case-control"),
    (re.compile(r"\bcase report\b", re.I), "case-report"),
)


def strongest(types: Iterable[StudyType]) -> StudyType | None:
    """The strongest of ``types`` by evidence rank, or None when there is none."""
    best: StudyType | None = None
    for t in types:
        if best is None or _RANK[t] > _RANK[best]:
            best = t
    return best


def evidence_level(study_type: StudyType | None) -> float | None:
    """The evidence weight (0-1) of a study type, or None for no study type."""
    return None if study_type is None else EVIDENCE_WEIGHTS[study_type]


def classify_pubmed(publication_types: Iterable[str], mesh_descriptors: Iterable[str] = ()) -> tuple[StudyType, float]:
    """Study type and evidence weight of a PubMed record from its publication types and MeSH."""
    found = [PUBLICATION_TYPES[p.strip().lower()] for p in publication_types if p.strip().lower() in PUBLICATION_TYPES]
    best = strongest(found)
    if best is None or best == "observational":
        design = strongest(MESH_DESIGNS[m.lower()] for m in mesh_descriptors if m.lower() in MESH_DESIGNS)
        if design is not None:
            best = design if best is None else strongest((best, design))
    final: StudyType = best or "other"
    return final, EVIDENCE_WEIGHTS[final]


def classify_jats(article_type: str | None, title: str, subjects: Iterable[str] = ()) -> tuple[StudyType, float]:
    """Study type of a PMC article: its ``article-type``, else what its title or headings say."""
    found: list[StudyType] = []
    if article_type and article_type.lower() in JATS_ARTICLE_TYPES:
        found.append(JATS_ARTICLE_TYPES[article_type.lower()])
    text = " ".join([title, *subjects])
    if article_type in (None, "", "research-article", "review-article", "other"):
        found += [t for pattern, t in _TITLE_PATTERNS if pattern.search(text)]
    final: StudyType = strongest(found) or "other"
    return final, EVIDENCE_WEIGHTS[final]
