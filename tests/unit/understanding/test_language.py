"""Language detection, with langdetect and by the stopwords alone."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from services.gateway.understanding import language as language_module
from services.gateway.understanding.language import detect_language


@pytest.mark.parametrize(
    ("text", "code"),
    [
        ("Quel est le traitement du paludisme chez la femme enceinte ?", "fr"),
        ("¿Cuál es el tratamiento de la malaria en el embarazo?", "es"),
        ("Welche Nebenwirkungen hat Metformin bei Diabetes?", "de"),
        ("Does metformin help women with polycystic ovary syndrome?", "en"),
        ("Statins after stroke", "en"),
        ("metformin obesity", "en"),
    ],
)
def test_language_detection(text: str, code: str) -> None:
    assert detect_language(text).code == code


@pytest.fixture
def no_langdetect() -> Iterator[None]:
    saved = language_module.HAVE_LANGDETECT
    language_module.HAVE_LANGDETECT = False
    yield
    language_module.HAVE_LANGDETECT = saved


def test_stopword_fallback_without_langdetect(no_langdetect: None) -> None:
    assert detect_language("Quel est le traitement du paludisme chez la femme enceinte ?").code == "fr"
    assert detect_language("What is the treatment of malaria in pregnancy?").code == "en"
    assert detect_language("metformin").method == "default"
