"""Language detection: ``langdetect`` (Google's language-detection port, seeded for stable answers) checked
against a small stopword count, which also decides on its own when langdetect is missing or unsure.

Medical questions are full of Latin and Greek words that confuse character n-gram detectors on short
texts, so: a text with no stopword of any known language is taken as English (keywords such as
"metformin obesity"); when langdetect and the stopwords disagree, clear stopword evidence wins.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from shared.text import LETTER_WORD

try:
    from langdetect import DetectorFactory, detect_langs
    from langdetect.lang_detect_exception import LangDetectException

    DetectorFactory.seed = 0
    HAVE_LANGDETECT = True
except ImportError:  # pragma: no cover - langdetect is a dependency; the stopwords still work
    HAVE_LANGDETECT = False

NAMES = {
    "en": "English",
    "fr": "French",
    "es": "Spanish",
    "de": "German",
    "it": "Italian",
    "pt": "Portuguese",
    "nl": "Dutch",
    "pl": "Polish",
    "sv": "Swedish",
    "da": "Danish",
    "no": "Norwegian",
    "fi": "Finnish",
    "tr": "Turkish",
    "ru": "Russian",
    "ja": "Japanese",
    "zh-cn": "Chinese",
    "zh-tw": "Chinese",
    "ko": "Korean",
    "ar": "Arabic",
    "ro": "Romanian",
    "cs": "Czech",
    "el": "Greek",
    "hu": "Hungarian",
    "id": "Indonesian",
    "vi": "Vietnamese",
    "uk": "Ukrainian",
    "he": "Hebrew",
    "hi": "Hindi",
    "ca": "Catalan",
}


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


STOPWORDS: dict[str, frozenset[str]] = {
    "en": _words(
        "the a an of and or is are was were in on for with what which how does do can should "
        "to from by be it this that there than after before my i"
    ),
    "fr": _words(
        "le la les un une des du de et ou est sont dans pour avec quel quelle quels quelles "
        "comment est-ce que qui au aux ce cette ces chez contre pendant après"
    ),
    "es": _words(
        "el la los las un una unos unas de del y o es son en para con qué cuál cómo por que "
        "se al su sus contra durante después"
    ),
    "de": _words(
        "der die das ein eine einen und oder ist sind in im für mit was welche wie bei von zu "
        "dem den des nach gegen während"
    ),
    "it": _words(
        "il lo la i gli le un una di del della e o è sono in per con che quale come nel dei delle contro durante dopo"
    ),
    "pt": _words("o a os as um uma de do da dos das e ou é são em para com que qual como no na contra durante depois"),
    "nl": _words("de het een en of is zijn in voor met wat welke hoe van bij te tegen tijdens na"),
}


@dataclass(frozen=True)
class Language:
    code: str
    name: str
    confidence: float
    method: str

    @property
    def english(self) -> bool:
        return self.code == "en"


def stopword_scores(text: str) -> dict[str, int]:
    words = [w.lower() for w in LETTER_WORD.findall(text)]
    return {lang: sum(1 for w in words if w in stops) for lang, stops in STOPWORDS.items()}


def _lang(code: str, confidence: float, method: str) -> Language:
    return Language(code, NAMES.get(code, code), round(confidence, 3), method)


def detect_language(text: str) -> Language:
    scores = stopword_scores(text)
    best = max(scores, key=lambda k: (scores[k], k == "en"))
    ranked = sorted(scores.values(), reverse=True)
    margin = ranked[0] - (ranked[1] if len(ranked) > 1 else 0)
    non_latin = bool(re.search(r"[^\x00-\u024f\s\d\W]", text))
    if HAVE_LANGDETECT:
        try:
            guesses = detect_langs(text)
        except LangDetectException:
            guesses = []
        if guesses:
            top = guesses[0]
            code, prob = str(top.lang), float(top.prob)
            if non_latin:  # stopwords know only Latin-script languages
                return _lang(code, prob, "langdetect")
            if code == best or (code not in STOPWORDS and prob >= 0.9 and ranked[0] == 0):
                return _lang(code, prob, "langdetect")
            if code not in STOPWORDS and ranked[0] >= 1 and margin >= 1:  # e.g. "Statins after stroke"
                return _lang(best, min(0.95, 0.5 + 0.1 * ranked[0]), "stopwords")
            if ranked[0] >= 2 and margin >= 1:  # clear stopword evidence wins a disagreement
                return _lang(best, min(0.95, 0.5 + 0.1 * ranked[0]), "stopwords")
            if ranked[0] == 0:
                return _lang("en", 0.5, "default")
            return _lang(code, prob, "langdetect") if prob >= 0.9 else _lang(best, 0.5, "stopwords")
    if ranked[0] == 0:
        return _lang("en", 0.5, "default")
    return _lang(best, min(0.95, 0.5 + 0.1 * ranked[0]), "stopwords")
