"""Source agreement against the fake Anthropic server: labels strictly checked, disagreement said, nothing guessed."""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from pydantic import SecretStr

from services.synthesizer.agreement import AGREEMENT_TOOL
from services.synthesizer.core import Synthesizer
from services.synthesizer.llm import ClaudeAnswerer
from shared.events import SynthesisReply, SynthesisRequest, SynthesisToken
from shared.settings import LlmSettings, Settings
from tests.factories import search_hit
from tests.fakes.anthropic_server import FakeAnthropic, agreeing_labels

hit = functools.partial(search_hit, title="Trial {pmid}")
PASSAGES = [
    hit("101", "Telephone counseling increased mammography screening among nonadherent women."),
    hit("202", "Telephone counseling did not change mammography screening rates in a second cohort.", 2),
    hit("303", "Print reminders were sent to all women of the practice.", 3),
]
QUESTION = "Does telephone counseling increase mammography screening?"
ANSWER = (
    "Telephone counseling increased mammography screening among nonadherent women [PMID:101]. "
    "A second cohort found no change in screening rates [PMID:202]."
)


def disagreeing(ids: Sequence[str]) -> dict[str, Any]:
    """Valid labels for the two cited sources, and labels that must all be dropped."""
    return {
        "main_finding": "Telephone counseling increases mammography screening.",
        "labels": [
            {"id": "PMID:101", "label": "supports", "reason": "Reports the increase."},
            {"id": "pmid 202", "label": "contradicts", "reason": "No change."},  # any id form, read strictly
            {"id": "PMID:99999999", "label": "supports"},  # made up
            {"id": "PMID:303", "label": "not_addressed"},  # retrieved but not cited by the answer
            {"id": "PMID:424242", "label": "supports"},  # never retrieved
            {"id": "PMID:101", "label": "contradicts"},  # a second label for the same source
            {"id": "PMID:202", "label": "refutes"},  # not a label
            "not an object",
        ],
    }


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeAnthropic]:
    with FakeAnthropic() as f:
        yield f


@pytest.fixture
def synth(fake: FakeAnthropic) -> Iterator[Synthesizer]:
    fake.requests.clear()
    fake.agreement = agreeing_labels
    llm = LlmSettings(anthropic_api_key=SecretStr("k"), anthropic_base_url=fake.url, model="claude-test")  # type: ignore[call-arg]
    yield Synthesizer(Settings(support={"check": "lexical"}), ClaudeAnswerer(llm))
    fake.agreement = agreeing_labels


def _agreement_calls(fake: FakeAnthropic) -> list[Any]:
    return [r for r in fake.requests if r.uses_tools and r.body["tools"][0]["name"] == AGREEMENT_TOOL]


async def test_labels_are_kept_only_for_cited_sources_and_the_rest_counted(
    synth: Synthesizer, fake: FakeAnthropic
) -> None:
    fake.agreement = disagreeing
    fake.reply_text(ANSWER)
    reply = await synth.answer(SynthesisRequest(question=QUESTION, passages=PASSAGES))
    agreement = reply.agreement
    assert agreement is not None and agreement.status == "labelled"
    assert [(a.citation_id, a.label) for a in agreement.labels] == [
        ("PMID:101", "supports"),
        ("PMID:202", "contradicts"),
    ]
    assert agreement.dropped == 6 and agreement.disagree and agreement.unlabelled == []
    assert agreement.counts.supports == 1 and agreement.counts.contradicts == 1 and agreement.counts.mixed == 0
    assert {a.number for a in agreement.labels} == {c.number for c in reply.citations}
    # The step was forced and saw only the cited sources.
    (call,) = _agreement_calls(fake)
    assert call.body["tool_choice"] == {"type": "tool", "name": AGREEMENT_TOOL}
    assert sorted(call.source_ids) == ["PMID:101", "PMID:202"]
    # Said plainly, by id and by number.
    assert reply.answer.endswith("1 source supports it [PMID:101] and 1 source contradicts it [PMID:202].")
    assert "the sources disagree" in reply.answer
    numbers = {c.citation_id: c.number for c in reply.citations}
    assert (reply.numbered_answer or "").endswith(
        f"1 source supports it [{numbers['PMID:101']}] and 1 source contradicts it [{numbers['PMID:202']}]."
    )


async def test_the_stream_ends_with_the_same_note(synth: Synthesizer, fake: FakeAnthropic) -> None:
    fake.agreement = disagreeing
    fake.reply_text(ANSWER)
    events = [e async for e in synth.stream(SynthesisRequest(question=QUESTION, passages=PASSAGES, stream=True))]
    final = events[-1]
    assert isinstance(final, SynthesisReply) and final.agreement is not None and final.agreement.disagree
    tokens = [e for e in events if isinstance(e, SynthesisToken)]
    assert [t.seq for t in tokens] == list(range(len(tokens)))
    assert "".join(t.text for t in tokens).strip() == final.answer


async def test_agreeing_sources_add_no_note(synth: Synthesizer, fake: FakeAnthropic) -> None:
    fake.reply_text(ANSWER)
    reply = await synth.answer(SynthesisRequest(question=QUESTION, passages=PASSAGES))
    assert reply.agreement is not None and reply.agreement.counts.supports == 2 and not reply.agreement.disagree
    assert "disagree" not in reply.answer


async def test_no_valid_label_means_none_and_why(synth: Synthesizer, fake: FakeAnthropic) -> None:
    fake.agreement = lambda ids: {"main_finding": "x", "labels": [{"id": "PMID:99999999", "label": "supports"}]}
    fake.reply_text(ANSWER)
    reply = await synth.answer(SynthesisRequest(question=QUESTION, passages=PASSAGES))
    assert reply.agreement is not None and reply.agreement.status == "failed"
    assert reply.agreement.labels == [] and reply.agreement.dropped == 1 and reply.agreement.reason
    assert reply.mode == "llm" and "disagree" not in reply.answer


async def test_one_source_is_not_compared(synth: Synthesizer, fake: FakeAnthropic) -> None:
    fake.reply_text("Telephone counseling increased mammography screening among nonadherent women [PMID:101].")
    reply = await synth.answer(SynthesisRequest(question=QUESTION, passages=PASSAGES))
    assert reply.agreement is not None and reply.agreement.status == "single-source" and not reply.agreement.labels
    assert _agreement_calls(fake) == []


async def test_offline_there_are_no_labels_and_the_reply_says_why() -> None:
    reply = await Synthesizer(Settings(support={"check": "lexical"})).answer(
        SynthesisRequest(question=QUESTION, passages=PASSAGES)
    )
    assert reply.mode == "extractive" and reply.agreement is not None
    assert reply.agreement.status == "offline" and reply.agreement.labels == []
    assert "ANTHROPIC_API_KEY" in (reply.agreement.reason or "")
