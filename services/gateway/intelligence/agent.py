"""Agentic mode ("Agentic RAG"): Claude with three tools, looping until it answers.

Each model turn is the synthesizer's ``agent_turn`` step (the system prompt and the tool definitions live
there, services/synthesizer/steps.py); the loop and the tools run here.

Passages returned by the tools reach Claude as delimited, escaped ``<source>`` blocks named untrusted data
(:mod:`shared.passages`), and its answer passes the citation gate of :mod:`shared.citations` like any other.

Tools: ``search_literature`` (hybrid search over everything stored), ``get_guideline`` (guideline chunks
only, by condition + findings) and ``check_drug_interaction`` (the FDA labels and the literature,
:mod:`.interactions`). Every call, its
input, what it returned and the source ids it added are recorded in :class:`AgentStep` so the response
shows them. The loop stops when Claude answers without a tool call, or after ``max_steps`` tool turns, when
it is asked once more to answer from what it has (no tools offered).

Offline there is no model to plan, so :func:`rule_plan` picks the tools from the question's class (an
interaction question: the interaction check and a literature search; a guideline question: the guideline
search; else a literature search) and the caller writes the answer from the sources with the extractive
synthesizer. The response says which planner ran.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from services.gateway.errors import new_error_id
from services.gateway.intelligence.llm import WorkflowLlm
from services.gateway.understanding.classify import Category, drug_pair
from shared.models import SearchHit
from shared.passages import source_block

log = logging.getLogger(__name__)


@dataclass
class ToolOutput:
    text: str
    sources: list[SearchHit] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)


class AgentTools(Protocol):
    async def search_literature(self, query: str) -> ToolOutput: ...

    async def get_guideline(self, condition: str, findings: list[str]) -> ToolOutput: ...

    async def check_drug_interaction(self, drugs: list[str]) -> ToolOutput: ...


@dataclass
class AgentStep:
    step: int
    tool: str
    input: dict[str, Any]
    output: str
    source_ids: list[str] = field(default_factory=list)
    error: str | None = None


@dataclass
class AgentRun:
    planner: str  # llm | rules
    steps: list[AgentStep]
    sources: list[SearchHit]
    answer: str | None = None
    stop_reason: str = "answered"


class SourceBook:
    """Sources gathered across tool calls, numbered once each, formatted for the model."""

    def __init__(self) -> None:
        self.hits: list[SearchHit] = []
        self._chunks: set[str] = set()

    def add(self, hits: Sequence[SearchHit]) -> list[SearchHit]:
        new = [h for h in hits if h.chunk_id not in self._chunks]
        for h in new:
            self._chunks.add(h.chunk_id)
            self.hits.append(h)
        return list(hits)

    def format(self, hits: Sequence[SearchHit], max_chars: int = 1500) -> str:
        if not hits:
            return "No relevant passage was found."
        blocks = []
        for h in hits:  # delimited, escaped blocks: passage text cannot forge a source (shared.passages)
            n = next(i for i, s in enumerate(self.hits, 1) if s.chunk_id == h.chunk_id)
            blocks.append(source_block(n, h, max_chars))
        return "\n\n".join(blocks)


async def run_tool(
    tools: AgentTools, book: SourceBook, name: str, args: dict[str, Any]
) -> tuple[str, list[str], str | None]:
    """(text for the model, source ids it returned, error) of one tool call."""
    try:
        if name == "search_literature":
            out = await tools.search_literature(str(args.get("query") or "").strip() or "medical evidence")
        elif name == "get_guideline":
            findings = [str(f) for f in args.get("findings") or [] if str(f).strip()]
            out = await tools.get_guideline(str(args.get("condition") or "").strip() or "guideline", findings)
        elif name == "check_drug_interaction":
            out = await tools.check_drug_interaction([str(d) for d in args.get("drugs") or []])
        else:
            return f"Unknown tool {name!r}.", [], f"unknown tool {name}"
    except Exception as exc:  # a failed tool is reported to the model, which may try another way
        error_id = new_error_id()  # the client sees the id; the detail stays in the log
        log.warning("agent tool failed", extra={"tool": name, "error": repr(exc)[:300], "error_id": error_id})
        return f"The tool failed: {type(exc).__name__}.", [], f"{type(exc).__name__} (error id {error_id})"
    hits = book.add(out.sources)
    text = out.text if not hits else (out.text + "\n\n" if out.text else "") + book.format(hits)
    return text, list(dict.fromkeys(h.citation_id for h in hits)), None


def rule_plan(question: str, category: Category, english_query: str) -> list[tuple[str, dict[str, Any]]]:
    if category == "drug_interaction":
        drugs = drug_pair(question) or drug_pair(english_query)
        plan: list[tuple[str, dict[str, Any]]] = []
        if len(drugs) >= 2:
            plan.append(("check_drug_interaction", {"drugs": drugs[:4]}))
        return [*plan, ("search_literature", {"query": english_query})]
    if category == "guideline":
        return [("get_guideline", {"condition": english_query, "findings": []})]
    return [("search_literature", {"query": english_query})]


class Agent:
    def __init__(self, llm: WorkflowLlm, tools: AgentTools, *, max_steps: int = 6, max_tokens: int = 2000):
        self.llm = llm
        self.tools = tools
        self.max_steps = max_steps
        self.max_tokens = max_tokens

    async def run_rules(self, question: str, category: Category, english_query: str) -> AgentRun:
        book = SourceBook()
        steps = []
        for i, (name, args) in enumerate(rule_plan(question, category, english_query), 1):
            text, ids, error = await run_tool(self.tools, book, name, args)
            steps.append(AgentStep(i, name, args, text[:4000], ids, error))
        return AgentRun("rules", steps, book.hits, None, "planned")

    async def run(self, question: str, *, instruction: str = "") -> AgentRun:
        """Claude's loop: each model turn is the synthesizer's ``agent_turn`` step (its system prompt and
        tool definitions live there); the tools run here."""
        book = SourceBook()
        steps: list[AgentStep] = []
        content = question + (f"\n\n{instruction}" if instruction else "")
        messages: list[dict[str, Any]] = [{"role": "user", "content": content}]
        turns = 0
        while True:
            offer_tools = turns < self.max_steps
            reply = await self.llm.turn(
                {"messages": messages, "offer_tools": offer_tools, "max_tokens": self.max_tokens}
            )
            blocks = [b for b in (reply.output or {}).get("content") or [] if isinstance(b, dict)]
            uses = [b for b in blocks if b.get("type") == "tool_use"]
            if not uses or not offer_tools:
                text = "".join(str(b.get("text") or "") for b in blocks if b.get("type") == "text").strip()
                stop = "answered" if offer_tools else "max_steps"
                return AgentRun("llm", steps, book.hits, text, stop)
            turns += 1
            messages.append({"role": "assistant", "content": blocks})
            results: list[dict[str, Any]] = []
            for block in uses:
                args = block.get("input") if isinstance(block.get("input"), dict) else {}
                name = str(block.get("name") or "")
                text, ids, error = await run_tool(self.tools, book, name, dict(args or {}))
                steps.append(AgentStep(len(steps) + 1, name, dict(args or {}), text[:4000], ids, error))
                results.append(
                    {
                        "type": "tool_result",
                        "tool_use_id": block.get("id"),
                        "content": text,
                        **({"is_error": True} if error else {}),
                    }
                )
            messages.append({"role": "user", "content": results})


def describe(steps: Sequence[AgentStep]) -> str:
    """A compact log line of the calls made."""
    return "; ".join(f"{s.tool}({json.dumps(s.input)[:80]}) -> {len(s.source_ids)} sources" for s in steps)
