"""The fake Anthropic server (``tests/fakes/anthropic_server.py``) taught the workflows' tools.

:class:`WorkflowAnthropic` answers the forced tool calls of :mod:`services.synthesizer.steps` with
plausible inputs (``record_disease_term``, ``record_broader_term``, ``record_organ_term``,
``record_search_terms``, ``classify_query``, ``rewrite_query``, ``record_assessment``: the sections of
its prompt plus one id that is not among them; ``record_findings``: the patient's fever, pregnancy and
travel, and the working diagnosis malaria (0.85) only when fever and travel were both said;
``record_differentials``: with fever and travel among the findings malaria (0.85) and typhoid fever (0.2),
with fever alone malaria (0.25) and influenza (0.2), citing the findings' own ids), overridable
per tool through ``tool_answers``, and plays a short agent script when the request offers the agent's tools: first
``search_literature``, then ``check_drug_interaction`` for a question about an interaction, then a final
answer citing the sources the tools returned (plus one hallucinated id, which must be removed; with
``agent_quotes`` also a claim that is the first source's first sentence, word for word). Anything
else goes to :class:`FakeAnthropic` unchanged (answers, evidence summaries, streaming).
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.fakes.anthropic_server import HALLUCINATED_PMID, FakeAnthropic, RecordedRequest, adversarial_answer

_CITED = re.compile(r"(?:\[|id=\")((?:PMID|PMCID|NBK|NCT|FDA):[A-Za-z0-9-]+)(?:\]|\")")
ToolAnswer = dict[str, Any] | Callable[[RecordedRequest], dict[str, Any]]
FORGED_SECTION = "NBK:NBK000666"  # cited by the fake's assessment, never a retrieved section
_SOURCE_TEXT = re.compile(r'<source n="\d+" id="([^"]+)">.*?<text>(.*?)</text>', re.DOTALL)


def first_sentence(results: str, citation_id: str) -> str | None:
    """The first sentence of the text of the ``<source>`` block citing ``citation_id`` in a tool's results."""
    for cid, text in _SOURCE_TEXT.findall(results):
        if cid == citation_id:
            m = re.match(r"\s*(.+?[.!?])(?=\s|$)", html.unescape(text), re.DOTALL)
            return m.group(1) if m else None
    return None


def _line(text: str, label: str) -> str:
    m = re.search(rf"^{label}:\s*(.+)$", text, re.MULTILINE)
    return m.group(1).strip() if m else ""


def _default(name: str, rec: RecordedRequest) -> dict[str, Any]:
    text = rec.user_text
    if name == "record_disease_term":
        disease = _line(text, "Disease").lower()
        term = re.split(r"[-,(]", disease)[0].strip() if "syndrome" in disease else disease
        return {"term": term or disease, "synonym": None}
    if name == "record_broader_term":
        return {"term": "disease"}  # over-generic on purpose: the blocklist must refuse it
    if name == "record_organ_term":
        return {"organ": "brain"}
    if name == "record_search_terms":
        drug = re.search(r"literature on (.+?) as a treatment for (.+?)\. Use", text, re.DOTALL)
        d, dis = (drug.group(1), drug.group(2)) if drug else ("drug", "disease")
        queries = [{"axis": "drug", "query": f"{d} AND ({dis}) AND trial[{i}]"} for i in range(5)]
        queries += [
            {"axis": "synonym", "query": f"llm-synonym AND ({dis})"},
            {"axis": "target_gene", "query": f"GENE1 AND ({dis})"},
            {"axis": "mechanism_organ", "query": "llm-mechanism AND brain"},
        ]
        return {"queries": queries}
    if name == "classify_query":
        return {"category": "guideline" if "guideline" in text.lower() else "other", "reason": "fake"}
    if name == "record_assessment":
        # The first two sections' ids the prompt gives, their titles, and one id that is not a section's.
        sections = re.findall(r'<section id="([^"]+)" title="([^"]*)">', text)
        said = [f"The patient's findings fall under {title} [{cid}]." for cid, title in sections[:2]]
        return {"assessment": " ".join([*said, f"Quinine is contraindicated [{FORGED_SECTION}]."])}
    if name == "record_findings":
        said = " ".join(re.findall(r'<message from="patient">(.*?)</message>', text, re.DOTALL)).lower()
        findings: list[dict[str, Any]] = []
        if "fever" in said:
            findings.append({"type": "symptom", "text": "fever for 3 days", "value": "3 days"})
        if "pregnant" in said:
            findings.append({"type": "pregnancy", "text": "pregnant, first trimester", "value": "first trimester"})
        if "mozambique" in said:
            findings.append({"type": "history", "text": "travel to Mozambique", "value": None})
        if "fever" in said and "mozambique" in said:
            return {"findings": findings, "diagnosis": "Malaria", "confidence": 0.85, "missing": []}
        asks = ["Have you travelled recently, and where to?", "Has a malaria blood smear or rapid test been done?"]
        return {"findings": findings, "diagnosis": None, "confidence": 0.0, "missing": asks}
    if name == "record_differentials":
        found = re.findall(r'<finding id="([^"]+)" type="[^"]*">(.*?)</finding>', text, re.DOTALL)
        fever = [i for i, t in found if "fever" in t.lower()]
        travel = [i for i, t in found if "mozambique" in t.lower()]
        if fever and travel:
            return {
                "differentials": [
                    {
                        "diagnosis": "Malaria",
                        "confidence": 0.85,
                        "supporting_finding_ids": fever + travel,
                        "separating_findings": ["Malaria rapid diagnostic test or blood smear"],
                    },
                    {
                        "diagnosis": "Typhoid fever",
                        "confidence": 0.2,
                        "supporting_finding_ids": fever,
                        "separating_findings": ["Blood culture", "Abdominal pain or constipation?"],
                    },
                ]
            }
        if fever:
            return {
                "differentials": [
                    {
                        "diagnosis": "Malaria",
                        "confidence": 0.25,
                        "supporting_finding_ids": fever,
                        "separating_findings": ["Have you travelled recently, and where to?"],
                    },
                    {
                        "diagnosis": "Influenza",
                        "confidence": 0.2,
                        "supporting_finding_ids": fever,
                        "separating_findings": ["Cough, sore throat or muscle pain?"],
                    },
                ]
            }
        return {"differentials": []}
    if name == "rewrite_query":
        q = _line(text, "Question")
        english = "What is the treatment of malaria in pregnancy?" if "paludisme" in q else q
        return {"english_question": english, "search_query": f"{english} treatment guideline", "terms": ["Malaria"]}
    raise KeyError(name)


class WorkflowAnthropic(FakeAnthropic):
    def __init__(self, **kwargs: Any):
        super().__init__(**kwargs)
        self.tool_answers: dict[str, ToolAnswer] = {}
        self.agent_drugs: list[str] = ["warfarin", "aspirin"]
        self.agent_quotes = False

    def _respond(self, h: BaseHTTPRequestHandler, rec: RecordedRequest) -> None:
        tools = [t.get("name") for t in rec.body.get("tools") or []]
        model = str(rec.body.get("model", "claude-fake"))
        if "search_literature" in tools:
            content, stop = self._agent_turn(rec)
            self._send_message(h, model, content, stop, rec)
            return
        if len(tools) == 1 and tools[0] not in (
            "record_evidence_summary",
            "record_claim_support",
            "record_source_agreement",
        ):
            name = str(tools[0])
            given = self.tool_answers.get(name)
            tool_input = given(rec) if callable(given) else (given if given is not None else _default(name, rec))
            block = {"type": "tool_use", "id": f"toolu_{len(self.requests)}", "name": name, "input": tool_input}
            self._send_message(h, model, [block], "tool_use", rec)
            return
        super()._respond(h, rec)

    def _agent_turn(self, rec: RecordedRequest) -> tuple[list[dict[str, Any]], str]:
        messages = rec.body.get("messages") or []
        question = messages[0]["content"] if messages and isinstance(messages[0]["content"], str) else ""
        called = [
            b["name"]
            for m in messages
            if m["role"] == "assistant"
            for b in m["content"]
            if isinstance(b, dict) and b.get("type") == "tool_use"
        ]
        results = " ".join(
            str(b.get("content"))
            for m in messages
            if m["role"] == "user" and isinstance(m["content"], list)
            for b in m["content"]
            if isinstance(b, dict)
        )
        n = len(self.requests)
        if "search_literature" not in called:
            query = question.split("\n")[0]
            return [
                {"type": "text", "text": "Let me search the literature."},
                {"type": "tool_use", "id": f"toolu_s{n}", "name": "search_literature", "input": {"query": query}},
            ], "tool_use"
        if "interact" in question.lower() and "check_drug_interaction" not in called:
            return [
                {
                    "type": "tool_use",
                    "id": f"toolu_i{n}",
                    "name": "check_drug_interaction",
                    "input": {"drugs": self.agent_drugs},
                }
            ], "tool_use"
        ids = list(dict.fromkeys(_CITED.findall(results)))
        if self.is_adversarial:  # attack the gate in the agent's answer too
            seen = RecordedRequest(rec.path, rec.headers, {"messages": [{"role": "user", "content": results}]}, rec.at)
            return [{"type": "text", "text": adversarial_answer(seen)}], "end_turn"
        if not ids:
            return [{"type": "text", "text": "The sources found do not answer this question."}], "end_turn"
        text = f"The retrieved evidence addresses the question [{ids[0]}]."
        if len(ids) > 1:
            text += f" A second source is consistent with it [{ids[1]}]."
        quoted = first_sentence(results, ids[0]) if self.agent_quotes else None
        if quoted is not None:
            text += f" {quoted} [{ids[0]}]"
        if "interaction" in results.lower():
            text += " The interaction service was consulted as reported above."
        text += f" One claim cites a paper never retrieved [PMID:{HALLUCINATED_PMID}]."
        return [{"type": "text", "text": text}], "end_turn"
