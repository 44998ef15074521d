"""Safety rules that run before any retrieval or model call.

Shared because both the gateway (which answers an emergency before any retrieval) and the synthesizer
(which never lets one reach the model, whoever sends the request) apply them.
"""

from __future__ import annotations

import re

DISCLAIMER = (
    "This summary of published research is for information only and is not medical advice. "
    "Talk to a qualified health professional about any medical decision."
)

EMERGENCY_ANSWER = (
    "This sounds like it could be a medical emergency. Call your local emergency number (for example 911, "
    "112 or 999) or go to the nearest emergency department now. If you are thinking about harming yourself, "
    "contact a crisis line such as 988 (US) or your local equivalent immediately. Evidentia cannot help "
    "with emergencies."
)

_EMERGENCY_PATTERNS = [
    r"\bchest pain\b",
    r"\bcan'?t breathe\b",
    r"\bcannot breathe\b",
    r"\bdifficulty breathing\b",
    r"\bshortness of breath\b",
    r"\bsevere bleeding\b",
    r"\bbleeding (?:heavily|profusely|won'?t stop)\b",
    r"\bunconscious\b",
    r"\bnot breathing\b",
    r"\bstroke symptoms\b",
    r"\bface drooping\b",
    r"\bslurred speech\b",
    r"\bsuicid(?:e|al)\b",
    r"\bkill (?:myself|himself|herself)\b",
    r"\bwant to die\b",
    r"\bself[- ]harm\b",
    r"\boverdos(?:e|ed|ing)\b",
    r"\bpoison(?:ed|ing)\b",
    r"\bseizure (?:now|right now)\b",
    r"\bhaving a seizure\b",
    r"\bheart attack\b",
    r"\banaphyla(?:xis|ctic)\b",
    r"\bthroat (?:is )?(?:closing|swelling)\b",
    r"\bsevere allergic reaction\b",
    r"\bcoughing (?:up )?blood\b",
    r"\bvomiting blood\b",
    r"\bsevere head injury\b",
    r"\bnumb(?:ness)? on one side\b",
    r"\bpassed out\b",
    r"\bchoking\b",
    r"\bblue lips\b",
    r"\blips (?:are|turning) blue\b",
    r"\bworst headache\b",
    r"\bend my life\b",
    r"\btook too many\b",
]
_EMERGENCY = re.compile("|".join(_EMERGENCY_PATTERNS), re.IGNORECASE)
_FIRST_PERSON = re.compile(
    r"\b(i|i'm|i am|my|me|we|our|he|she|they|someone|somebody|child|son|daughter|"
    r"husband|wife|mom|dad|mother|father|friend)\b",
    re.IGNORECASE,
)

_RESEARCH = re.compile(
    r"\b(risk|rates?|prevalence|incidence|trials?|stud(?:y|ies)|evidence|associat\w*|prevent\w*|"
    r"reduc\w*|efficacy|effect\w*|outcomes?|patients|population|cohort|among)\b",
    re.IGNORECASE,
)
_SELF_HARM = re.compile(r"\b(suicid|kill myself|want to die|self[- ]harm|overdos|end my life)", re.IGNORECASE)


def is_emergency(text: str) -> bool:
    """An urgent personal situation (emergency wording about a person now), not a research question.

    "chest pain in athletes: prevalence?" is research; "my father has chest pain" is an emergency.
    """
    match = _EMERGENCY.search(text)
    if not match:
        return False
    personal = bool(_FIRST_PERSON.search(text))
    if _SELF_HARM.search(text):
        # Self-harm wording is urgent unless it is plainly a research question about a population.
        return personal or not _RESEARCH.search(text)
    return personal
