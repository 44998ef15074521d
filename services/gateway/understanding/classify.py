"""Question classification: what kind of question it is decides how it is answered.

Categories: ``drug_information``, ``disease_information``, ``drug_interaction``, ``guideline``,
``emergency``, ``other``. Emergencies are always found by the shared safety rules first (never left to a
model); otherwise Claude classifies when a key is set, and keyword and word-shape rules do offline.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

from services.gateway.intelligence.llm import WorkflowLlm
from shared.safety import acheck_emergency, is_emergency

Category = Literal["drug_information", "disease_information", "drug_interaction", "guideline", "emergency", "other"]
CATEGORIES: tuple[Category, ...] = (
    "drug_information",
    "disease_information",
    "drug_interaction",
    "guideline",
    "emergency",
    "other",
)

_INTERACTION = re.compile(
    r"\b(interact\w*|contraindicated with|together with|combin(?:e|ed|ing) with|taken with|take \w+ with|"
    r"mix(?:ing)? \w+ (?:and|with)|co-?administ\w*|drug[- ]drug)\b",
    re.IGNORECASE,
)
_GUIDELINE = re.compile(
    r"\b(guidelines?|recommend\w*|protocols?|first[- ]line|second[- ]line|standard of care|treatment of choice|"
    r"how (?:should|do|to) (?:i |we |you )?(?:treat|manage)|management of|should (?:be|\w+) treated|WHO|NICE|"
    r"regimen)\b",
    re.IGNORECASE,
)
_DRUG_WORDS = re.compile(
    r"\b(drugs?|medications?|medicines?|side[- ]effects?|adverse (?:effects?|events?)|dos(?:e|es|age|ing)|"
    r"tablets?|pills?|mechanism of action|pharmacokinetics?|contraindications?|efficacy of|safety of)\b",
    re.IGNORECASE,
)
_DRUG_NAME = re.compile(
    r"\b[a-z]{3,}(?:mab|nib|pril|sartan|olol|statins?|mycin|cillin|azole|tide|vir|formin|pam|lam|tine|pine|"
    r"profen|oxacin|cycline|dronate|gliptin|gliflozin|parin|xaban|gatran|triptan|setron|prazole|semide|"
    r"thiazide|caine|barbital|done|ridone|pion)\b",
    re.IGNORECASE,
)
_KNOWN_DRUGS = frozenset(
    {
        "aspirin",
        "metformin",
        "insulin",
        "warfarin",
        "paracetamol",
        "acetaminophen",
        "ibuprofen",
        "heparin",
        "lithium",
        "digoxin",
        "morphine",
        "codeine",
        "bupropion",
        "sertraline",
        "fluoxetine",
        "amoxicillin",
        "artesunate",
        "artemether",
        "lumefantrine",
        "quinine",
        "primaquine",
        "chloroquine",
        "clopidogrel",
        "simvastatin",
        "atorvastatin",
        "prednisone",
        "dexamethasone",
        "methotrexate",
        "tamoxifen",
        "levothyroxine",
        "grapefruit",
        "alcohol",
        "statin",
        "statins",
        "antibiotics",
        "antidepressants",
        "st john's wort",
        "omeprazole",
        "amiodarone",
        "clarithromycin",
        "ketoconazole",
    }
)
_DISEASE_WORDS = re.compile(
    r"\b(symptoms?|signs?|causes?|diagnos\w*|prognosis|risk factors?|prevalence|incidence|complications?|"
    r"what is|pathophysiology|epidemiology|screening|disease|syndrome|disorder|infection|cancer|tumou?r|"
    r"diabetes|hypertension|malaria|asthma|\w+(?:itis|osis|emia|aemia|oma|pathy))\b",
    re.IGNORECASE,
)


@dataclass
class Classification:
    category: Category
    method: str
    signals: list[str] = field(default_factory=list)


def drug_names(text: str) -> list[str]:
    """Drug-like words in order (known names and common drug-name endings)."""
    out: dict[str, None] = {}
    for m in re.finditer(r"[A-Za-z][A-Za-z'-]+(?: john's wort)?", text):
        word = m.group(0).lower()
        if word in _KNOWN_DRUGS or _DRUG_NAME.fullmatch(word):
            out[word] = None
    return list(out)


_PAIR = [
    re.compile(r"\bbetween ([\w' -]+?) and ([\w' -]+?)(?:[?.!,]|$)", re.IGNORECASE),
    re.compile(
        r"\b(?:take|taking|combine|combining|mix|mixing|use|using) ([\w'-]+) (?:with|and) ([\w'-]+)", re.IGNORECASE
    ),
    re.compile(r"\b(?:does|do|can|will) ([\w'-]+) interact with ([\w'-]+)", re.IGNORECASE),
    re.compile(r"\b([\w'-]+) (?:and|with|\+) ([\w'-]+) (?:interaction|together)", re.IGNORECASE),
]


def drug_pair(text: str) -> list[str]:
    """The drugs of an interaction question ("between warfarin and aspirin"), else the drug-like words."""
    for pattern in _PAIR:
        m = pattern.search(text)
        if m:
            pair = [g.strip().lower() for g in m.groups()]
            if all(pair) and pair[0] != pair[1]:
                return pair
    return drug_names(text)


def rule_classify(question: str) -> Classification:
    if is_emergency(question):
        return Classification("emergency", "guard", ["the emergency guard (shared.safety)"])
    signals: list[str] = []
    drugs = drug_names(question)
    if _INTERACTION.search(question) and (len(drugs) >= 2 or re.search(r"\binteract", question, re.I)):
        signals.append("interaction wording")
        return Classification("drug_interaction", "rules", [*signals, f"drugs: {', '.join(drugs)}"])
    if _GUIDELINE.search(question):
        return Classification("guideline", "rules", ["guideline wording"])
    drug_score = len(drugs) * 2 + len(_DRUG_WORDS.findall(question))
    disease_score = len(_DISEASE_WORDS.findall(question))
    if drug_score and drug_score >= disease_score:
        return Classification("drug_information", "rules", [f"drug signals {drug_score} >= disease {disease_score}"])
    if disease_score:
        return Classification("disease_information", "rules", [f"disease signals {disease_score}"])
    return Classification("other", "rules", [])


class QueryClassifier:
    def __init__(self, llm: WorkflowLlm):
        self.llm = llm

    async def classify(self, question: str) -> Classification:
        verdict = await acheck_emergency(question)  # safety first, whatever a model would say
        if verdict.emergency:
            return Classification("emergency", "guard", [verdict.reason])
        data = await self.llm.step("classify", {"question": question})
        category = (data or {}).get("category")
        if category in CATEGORIES and category != "emergency":
            reason = str((data or {}).get("reason") or "")[:200]
            return Classification(category, "llm", [reason] if reason else [])
        return rule_classify(question)
