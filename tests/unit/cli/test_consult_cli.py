"""``evidentia consult``: the interactive loop sends each patient line as one turn, continues the consultation
the gateway named, gives ``/dx`` with the next turn only, and prints the findings, differentials and plans;
``--say`` sends one turn without prompting. The gateway is a mock that keeps the turns it was sent."""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from cli.consult import interview, print_turn, turn_body
from cli.gateway import GatewayClient
from cli.main import main


def response(body: dict[str, Any], turn: int) -> dict[str, Any]:
    plan = {
        "top_section": "Malaria guideline > Malaria in pregnancy",
        "plan": [
            {
                "text": "Give artemether plus lumefantrine.",
                "citation_ids": ["NBK:NBK999004"],
                "sections": ["Malaria guideline > Malaria in pregnancy > First trimester"],
            }
        ],
    }
    return {
        "consultation_id": body.get("consultation_id") or "c0ffee",
        "turn": turn,
        "status": "recommended" if turn > 1 else "needs_findings",
        "findings": [
            {"type": "symptom", "text": m["content"], "source": "llm", "turn": turn} for m in body["messages"]
        ],
        "diagnosis": body.get("diagnosis"),
        "diagnosis_source": "caller" if body.get("diagnosis") else None,
        "confidence": None,
        "differentials": [
            {
                "rank": 1,
                "diagnosis": "Malaria",
                "confidence": 0.85,
                "source": "llm",
                "supporting_findings": ["fever"],
                "separating_findings": ["Rapid test"],
                "planned": turn > 1,
                "recommendation": plan if turn > 1 else None,
            }
        ],
        "plan_min_confidence": 0.3,
        "missing": ["Have you travelled?"],
        "notes": [],
        "disclaimer": "Not medical advice.",
    }


class Gateway:
    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []

    def handler(self, request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/v1/guidelines/consult"
        body = json.loads(request.content)
        self.sent.append(body)
        return httpx.Response(200, json=response(body, len(self.sent)))

    def client(self) -> GatewayClient:
        return GatewayClient("http://gateway", None, transport=httpx.MockTransport(self.handler))


def lines(*said: str) -> Iterator[str]:
    yield from said


def test_each_line_is_a_turn_of_the_same_consultation_and_dx_goes_with_the_next_turn_only(
    capsys: pytest.CaptureFixture[str],
) -> None:
    gw = Gateway()
    said = lines("I have a fever.", "", "/dx Malaria", "I came back from Mozambique.", "/quit", "never sent")
    args = argparse.Namespace(consultation_id=None, diagnosis=None, population="adult")
    last = interview(gw.client(), args, lambda _prompt: next(said))
    assert gw.sent == [
        {"messages": [{"role": "user", "content": "I have a fever."}], "population": "adult"},
        {
            "messages": [{"role": "user", "content": "I came back from Mozambique."}],
            "consultation_id": "c0ffee",
            "diagnosis": "Malaria",
        },
    ]
    assert last is not None and last["turn"] == 2
    printed = " ".join(capsys.readouterr().out.split())  # as read, whatever the terminal's width
    assert "1. Malaria: 0.85 [llm], not planned (below 0.3)" in printed  # turn 1
    assert "1. Malaria: 0.85 [llm], planned" in printed and "to tell apart: Rapid test" in printed
    assert "[NBK:NBK999004] (Malaria guideline > Malaria in pregnancy > First trimester)" in printed


def test_the_end_of_input_ends_the_interview() -> None:
    gw = Gateway()

    def read(_prompt: str) -> str:
        raise EOFError

    args = argparse.Namespace(consultation_id="abc", diagnosis=None, population=None)
    assert interview(gw.client(), args, read) is None and gw.sent == []


def test_turn_body_leaves_out_what_was_not_given() -> None:
    assert turn_body(["a", "b"], None, None, None) == {
        "messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]
    }
    assert turn_body(["a"], "id1", "Malaria", None)["consultation_id"] == "id1"


def test_say_sends_one_turn_without_prompting(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    gw = Gateway()
    monkeypatch.setattr("cli.consult.client_from_args", lambda args, timeout: gw.client())
    monkeypatch.setattr("builtins.input", lambda _prompt: pytest.fail("prompted"))
    code = main(["consult", "--id", "abc", "--say", "fever", "--say", "from Mozambique", "--diagnosis", "Malaria"])
    assert code == 0
    assert gw.sent == [
        {
            "messages": [{"role": "user", "content": "fever"}, {"role": "user", "content": "from Mozambique"}],
            "consultation_id": "abc",
            "diagnosis": "Malaria",
        }
    ]
    assert "Consultation abc, turn 1" in capsys.readouterr().out


def test_print_turn_shows_the_callers_diagnosis_as_given(capsys: pytest.CaptureFixture[str]) -> None:
    print_turn(response({"messages": [{"content": "fever"}], "diagnosis": "Malaria"}, 2))
    assert "Working diagnosis: Malaria (caller, as given)" in capsys.readouterr().out
