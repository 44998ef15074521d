"""The one text module: words, stop words, stems, sentences, ``Retry-After``."""

from __future__ import annotations

import email.utils
import time

import pytest

from shared.text import (
    LETTER_WORD,
    MESH_WORD,
    QUERY_STOP_WORDS,
    SENTENCE_END,
    STOP_WORDS,
    WORD_PIECE,
    content_words,
    parse_retry_after,
    prefix_stem,
    singular,
    split_sentences,
    stem_words,
    words,
)


def test_words_join_inner_hyphens_and_apostrophes_and_lower_case() -> None:
    assert words("Beta-blockers in Crohn's disease: COVID-19, 2 RCTs.") == [
        "beta-blockers",
        "in",
        "crohn's",
        "disease",
        "covid-19",
        "2",
        "rcts",
    ]
    assert words("-leading and trailing- 'quoted'") == ["leading", "and", "trailing", "quoted"]


def test_word_pieces_split_compounds() -> None:
    assert WORD_PIECE.findall("beta-blockers in crohn's") == ["beta", "blockers", "in", "crohn", "s"]
    assert MESH_WORD.findall("beta-blockers in crohn's") == ["beta", "blockers", "in", "crohn's"]


def test_letter_words_read_any_script_and_no_digits() -> None:
    assert LETTER_WORD.findall("Quelle est l'efficacité de COVID-19 ? Что это") == [
        "Quelle",
        "est",
        "l'efficacité",
        "de",
        "COVID",
        "Что",
        "это",
    ]


def test_content_words_drop_stop_words_and_short_words() -> None:
    text = "Do statins reduce the risk of a stroke after surgery in you?"
    assert content_words(text) == ["statins", "reduce", "risk", "stroke", "surgery"]
    assert content_words("an ox is ok", min_length=3) == []
    assert content_words("the ox", min_length=1, stop_words=frozenset()) == ["the", "ox"]


def test_the_query_list_keeps_words_that_tell_descriptors_apart() -> None:
    assert QUERY_STOP_WORDS < STOP_WORDS
    # "Troponin I", "Infant, Very Low Birth Weight", "Aged, 80 and over": the MeSH expansion must keep these.
    assert {"i", "very", "over", "under", "up", "no", "not"}.isdisjoint(QUERY_STOP_WORDS)
    assert {"i", "very", "over", "under", "up", "no", "not"} <= STOP_WORDS


def test_stems() -> None:
    assert stem_words(["statins", "statin", "reduced", "reduces"]) == ["statin", "statin", "reduc", "reduc"]
    assert prefix_stem("hypertension") == "hypert"
    assert prefix_stem("bp") == "bp"
    assert [singular(w) for w in ("statins", "mass", "flus", "antibiotics")] == ["statin", "mass", "flus", "antibiotic"]


def test_sentences_break_before_a_capital_digit_or_bracket_only() -> None:
    text = " Statins work. 30% fewer strokes! (Table 2.) More. [PMID:1] e.g. this stays. Does it? yes. "
    assert split_sentences(text) == [
        "Statins work.",
        "30% fewer strokes!",
        "(Table 2.) More.",
        "[PMID:1] e.g. this stays.",
        "Does it? yes.",
    ]
    assert split_sentences("  ") == []
    assert SENTENCE_END == ".!?"


def test_retry_after_reads_seconds_and_http_dates() -> None:
    assert parse_retry_after("7") == 7.0
    assert parse_retry_after(" 0 ") == 0.0
    assert parse_retry_after("-3") == 0.0
    now = time.time()
    date = email.utils.formatdate(now + 30, usegmt=True)
    wait = parse_retry_after(date, now=now)
    assert wait is not None and 29.0 <= wait <= 31.0
    assert parse_retry_after(email.utils.formatdate(now - 60, usegmt=True), now=now) == 0.0
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:10 GMT", now=1445412480.0) == pytest.approx(10.0)
    # A date naming no zone is an HTTP date all the same: GMT, whatever the machine's zone.
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:10", now=1445412480.0) == pytest.approx(10.0)


@pytest.mark.parametrize("value", [None, "", "   ", "soon"])
def test_retry_after_absent_or_unreadable_is_none(value: str | None) -> None:
    assert parse_retry_after(value) is None
