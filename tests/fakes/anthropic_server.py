"""A local fake of the Anthropic Messages API on 127.0.0.1 (a random port), for the real ``anthropic`` SDK.

    with FakeAnthropic() as fake:
        client = anthropic.AsyncAnthropic(base_url=fake.url, api_key="test", max_retries=0)
        ...
        assert "PMID:123" in fake.requests[-1].user_text

``POST /v1/messages`` answers:

- a request with ``tools`` gets a ``tool_use`` block calling the first tool, whose input comes from
  ``tool_input`` (a callable of the request's source ids; by default a valid evidence summary citing the first
  two sources, plus one id that was never given, so callers can check it is removed);
- a ``record_source_agreement`` request (the synthesizer's source-agreement step) gets the input of ``agreement``
  (a callable of the ids of the sources it was given; by default every one ``supports``), never a queued reply;
- any other request gets a text answer from ``answer`` (a callable of the source ids; by default two sentences
  citing the first two sources and one citing a hallucinated PMID);
- ``"stream": true`` gets the answer as server-sent events, frame for frame as the real API sends them
  (``message_start``, ``content_block_start``, ``content_block_delta`` per piece, ``content_block_stop``,
  ``message_delta``, ``message_stop``), with ``token_delay_s`` between deltas.

Queued replies (:meth:`reply_text`, :meth:`reply_tool`, :meth:`fail_next`) take precedence, first in first
out. Every request is recorded with its headers and JSON body.

Every answer carries ``usage`` as the real API counts it (:meth:`FakeAnthropic.usage`): tokens estimated at four
characters each; prompt caching as the API does it: the prefix up to the last ``cache_control`` breakpoint of the
tools and system blocks, if it has at least ``cache_min_tokens`` (the API's minimum cacheable prompt), is written
to the cache on its first request (``cache_creation_input_tokens``) and read on the next ones with the same model
and prefix (``cache_read_input_tokens``); ``input_tokens`` counts only the rest. A streamed answer gives the input
and cache counts in ``message_start`` and the final output count in ``message_delta``, like the real API. Each
answer's usage is kept in :attr:`FakeAnthropic.usages` (model, usage), in the order sent.

:meth:`FakeAnthropic.adversarial` is a stand-in that attacks the citation gate in every channel: its text answers
(whole and streamed, cut every few characters so brackets straddle deltas) and its evidence-summary tool input
fabricate ids of every kind (:data:`FABRICATED`), write real and made-up ids in every form (lower case, bare,
parenthesised, lists mixing both, links), cite ids forged inside passage text, and misattribute a sentence of
one source to another. Its claim-support judge (``record_claim_support``) is honest: it scores a claim by how
many of its words the cited passages contain.
"""

from __future__ import annotations

import html
import json
import math
import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.fakes.http import LocalHttpServer, QuietHandler, send_json

HALLUCINATED_PMID = "99999999"
# Ids no test source has, in every kind: none of their numbers may ever reach a client.
FABRICATED = ("PMID:99999999", "PMID:88888888", "PMID:77777777", "PMID:66666666", "PMCID:PMC9999999", "NBK:NBK999999")
FABRICATED_NUMBERS = tuple(f.split(":")[1].removeprefix("PMC").removeprefix("NBK") for f in FABRICATED)
_SOURCE_ID = re.compile(
    r'^(?:Source \d+ \[([A-Za-z]+:[A-Za-z0-9]+)\]|<source n="\d+" id="([A-Za-z]+:[A-Za-z0-9]+)">)', re.MULTILINE
)
_SOURCE_TEXT = re.compile(r'<source n="\d+" id="([^"]+)">.*?<text>(.*?)</text>', re.DOTALL)
_ANY_ID = re.compile(r"\b(?:PMID|PMCID|NBK):[A-Za-z0-9]+")


def default_answer(ids: Sequence[str]) -> str:
    if not ids:
        return "The retrieved sources do not answer this question."
    first = ids[0]
    second = ids[1] if len(ids) > 1 else ids[0]
    return (
        f"The strongest evidence comes from the first source, which reports a clear benefit [{first}]. "
        f"A second study reached a consistent result in a different population [{second}]. "
        f"Some claim that it cures everything [PMID:{HALLUCINATED_PMID}]."
    )


def _bare(cid: str) -> str:
    return cid.removeprefix("PMID:")


def default_tool_input(ids: Sequence[str]) -> dict[str, Any]:
    used = list(ids[:2])
    return {
        "summary": "Two studies suggest a benefit; the evidence is moderate.",
        "study_count": len(used) + 5,  # over-counts on purpose: the synthesizer clamps it
        "study_types": ["randomized-controlled-trial"],
        "strength": "moderate",
        "key_findings": [
            {"finding": "A clear benefit was reported.", "supporting_pmids": [_bare(i) for i in used[:1]]},
            {
                "finding": "A consistent result in another population.",
                "supporting_pmids": [_bare(i) for i in used[1:]],
            },
            {"finding": "It cures everything.", "supporting_pmids": [HALLUCINATED_PMID]},
        ],
        "supporting_pmids": [*(_bare(i) for i in used), HALLUCINATED_PMID],
    }


def _num(cid: str) -> str:
    return cid.split(":", 1)[1]


def _first_sentence(text: str) -> str:
    head = re.split(r"(?<=[.!?])\s+", text.strip())[0].strip()
    return head.rstrip(".!?") or "The study reported a result"


def adversarial_answer(rec: RecordedRequest) -> str:
    """An answer that attacks the gate every way at once (see the module docstring)."""
    ids = rec.source_ids
    if not ids:
        return f"Nothing relevant was found, but see [PMID:{HALLUCINATED_PMID}]."
    texts = rec.source_texts
    a, b = ids[0], ids[1] if len(ids) > 1 else ids[0]
    f = FABRICATED
    parts = [
        f"{_first_sentence(texts.get(a, ''))} [{a.lower()}].",  # a real id in lower case: kept, normalised
        f"{_first_sentence(texts.get(b, ''))} ({b.replace(':', ': ')}).",  # parenthesised: kept
        f"It cures every patient [{f[0]}].",  # made up, canonical form
        f"Mortality fell by half in one trial PMID {_num(f[1])} and in another pmid:{_num(f[2])}.",  # unbracketed
        f"Two reviews agree [{a}, {_num(f[3])}] and [{_num(f[1])}].",  # a list mixing a real and a made-up id; bare
        f"Guidelines concur [{f[5]}; {f[4]}] (PMCID: {_num(f[4])}) and {_num(f[4])}.",  # other kinds
        f"The full text is at https://pubmed.ncbi.nlm.nih.gov/{_num(f[0])}/ for anyone to read.",  # a link
        # Misattribution: the first source's finding cited to another source only.
        f"{_first_sentence(texts.get(a, ''))}, as shown by [{b}]." if b != a else "",
    ]
    parts += [f"As the source itself instructs, this is established [{forged}]." for forged in rec.forged_ids]
    return " ".join(p for p in parts if p)


def adversarial_tool_input(rec: RecordedRequest) -> dict[str, Any]:
    """An evidence summary whose text, findings and id lists all carry made-up and mis-formatted ids."""
    ids = rec.source_ids
    f = FABRICATED
    used = ids[:2]
    return {
        "summary": f"Two studies suggest a benefit [{f[0]}]; see also PMID {_num(f[1])} and {_num(f[4])}.",
        "study_count": 9,
        "study_types": ["randomized-controlled-trial"],
        "strength": "high",
        "key_findings": [
            {
                "finding": f"A clear benefit was reported [{used[0].lower() if used else f[0]}] (PMID: {_num(f[2])}).",
                "supporting_pmids": [*(f"[{i.lower()}]" for i in used[:1]), _num(f[2])],
            },
            {"finding": f"It cures everything [{f[3]}].", "supporting_pmids": [_num(f[0]), f[5]]},
            {
                "finding": "A consistent result in another population.",
                "supporting_pmids": [f"pmid {_num(i)}" for i in used[1:]] + [f[4]],
            },
        ],
        "supporting_pmids": [*(_num(i) for i in used), *(_num(x) for x in f)],
    }


def agreeing_labels(ids: Sequence[str]) -> dict[str, Any]:
    """Source-agreement labels (``record_source_agreement``): every given source supports the main finding."""
    return {
        "main_finding": "The treatment helps.",
        "labels": [{"id": cid, "label": "supports", "reason": "Reports the benefit."} for cid in ids],
    }


def honest_support(rec: RecordedRequest) -> dict[str, Any]:
    """Claim-support verdicts: the share of a claim's words its cited passages contain (a crude, honest judge)."""
    verdicts = []
    for n, body in re.findall(r'<claim n="(\d+)">(.*?)</claim>', rec.user_text, re.DOTALL):
        statement = html.unescape(re.search(r"<statement>(.*?)</statement>", body, re.DOTALL).group(1))  # type: ignore[union-attr]
        passage = html.unescape(" ".join(re.findall(r"<text>(.*?)</text>", body, re.DOTALL))).lower()
        words = [w for w in re.findall(r"[a-z]{4,}", statement.lower())]
        share = sum(w in passage for w in words) / max(1, len(words))
        verdicts.append({"claim": int(n), "support": 0.95 if share >= 0.8 else 0.1})
    return {"verdicts": verdicts}


@dataclass(frozen=True)
class RecordedRequest:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    at: float

    @property
    def user_text(self) -> str:
        """The text of the last user message."""
        messages = self.body.get("messages") or []
        users = [m for m in messages if m.get("role") == "user"]
        if not users:
            return ""
        content = users[-1].get("content")
        if isinstance(content, str):
            return content
        return "".join(b.get("text", "") for b in content if isinstance(b, dict))

    @property
    def source_ids(self) -> list[str]:
        return [a or b for a, b in _SOURCE_ID.findall(self.user_text)]

    @property
    def source_texts(self) -> dict[str, str]:
        """Each source block's id and its text, unescaped (what a model reads)."""
        return {cid: html.unescape(text) for cid, text in _SOURCE_TEXT.findall(self.user_text)}

    @property
    def forged_ids(self) -> list[str]:
        """Ids written inside passage text that are not the id of any source block (a forgery or a redirect)."""
        real = set(self.source_ids)
        found = _ANY_ID.findall(" ".join(self.source_texts.values()))
        return [i for i in dict.fromkeys(found) if i not in real]

    @property
    def streamed(self) -> bool:
        return bool(self.body.get("stream"))

    @property
    def uses_tools(self) -> bool:
        return bool(self.body.get("tools"))


@dataclass
class _Queued:
    kind: str  # "text" | "tool" | "error"
    text: str = ""
    tool_input: dict[str, Any] = field(default_factory=dict)
    status: int = 500


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that went away mid-answer (a cancelled call) is not an error here


class FakeAnthropic(LocalHttpServer):
    thread_name = "fake-anthropic"
    server_class = _QuietServer

    def __init__(
        self,
        *,
        answer: Callable[[Sequence[str]], str] = default_answer,
        tool_input: Callable[[Sequence[str]], dict[str, Any]] = default_tool_input,
        agreement: Callable[[Sequence[str]], dict[str, Any]] = agreeing_labels,
        token_delay_s: float = 0.0,
        chunk_words: int = 2,
        adversarial: bool = False,
        chunk_chars: int | None = None,
        cache_min_tokens: int = 1024,
        response_delay_s: float = 0.0,
    ):
        super().__init__()
        self.response_delay_s = response_delay_s  # before a whole (non-streamed) message: a slow model
        self.answer = answer
        self.tool_input = tool_input
        self.agreement = agreement  # the source-agreement step's input, from the ids of the sources it was given
        self.token_delay_s = token_delay_s
        self.chunk_words = chunk_words
        self.is_adversarial = adversarial
        self.chunk_chars = chunk_chars
        self.requests: list[RecordedRequest] = []
        self.cache_min_tokens = cache_min_tokens
        self.usages: list[tuple[str, dict[str, Any]]] = []
        self._cached: set[tuple[str, str]] = set()
        self._queue: list[_Queued] = []
        self._lock = threading.Lock()

    @classmethod
    def adversarial(cls, **kwargs: Any) -> FakeAnthropic:
        """The stand-in that attacks the citation gate in every channel, streaming three characters a delta."""
        return cls(adversarial=True, chunk_chars=3, **kwargs)

    # --- scripting -------------------------------------------------------------------------------

    def reply_text(self, text: str) -> None:
        with self._lock:
            self._queue.append(_Queued("text", text=text))

    def reply_tool(self, tool_input: dict[str, Any]) -> None:
        with self._lock:
            self._queue.append(_Queued("tool", tool_input=tool_input))

    def fail_next(self, status: int = 500) -> None:
        with self._lock:
            self._queue.append(_Queued("error", status=status))

    def _next(self, tools: bool) -> _Queued | None:
        with self._lock:
            for i, q in enumerate(self._queue):
                if q.kind == "error" or (q.kind == "tool") == tools:
                    return self._queue.pop(i)
        return None

    # --- server ----------------------------------------------------------------------------------

    def handler_class(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(QuietHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                try:
                    body = json.loads(self.rfile.read(length) or b"{}")
                except json.JSONDecodeError:
                    send_json(
                        self,
                        400,
                        {
                            "type": "error",
                            "error": {"type": "invalid_request_error", "message": "body is not JSON"},
                        },
                    )
                    return
                rec = RecordedRequest(
                    self.path, {k.lower(): v for k, v in self.headers.items()}, body, time.monotonic()
                )
                with fake._lock:
                    fake.requests.append(rec)
                if self.path.split("?")[0] != "/v1/messages":
                    send_json(self, 404, {"type": "error", "error": {"type": "not_found_error", "message": self.path}})
                    return
                fake._respond(self, rec)

        return Handler

    # --- answers ---------------------------------------------------------------------------------

    def _respond(self, h: BaseHTTPRequestHandler, rec: RecordedRequest) -> None:
        model = str(rec.body.get("model", "claude-fake"))
        tools = rec.body.get("tools") or []
        if tools and tools[0].get("name") == "record_claim_support":  # the support check: never scripted
            block = {"type": "tool_use", "id": f"toolu_{len(self.requests)}", "name": tools[0]["name"]}
            self._send_message(h, model, [{**block, "input": honest_support(rec)}], "tool_use", rec)
            return
        if tools and tools[0].get("name") == "record_source_agreement":  # scripted through ``agreement`` only
            block = {"type": "tool_use", "id": f"toolu_{len(self.requests)}", "name": tools[0]["name"]}
            self._send_message(h, model, [{**block, "input": self.agreement(rec.source_ids)}], "tool_use", rec)
            return
        queued = self._next(rec.uses_tools)
        if queued is not None and queued.kind == "error":
            error = {"type": "api_error", "message": "injected failure"}
            send_json(h, queued.status, {"type": "error", "error": error})
            return
        if rec.uses_tools:
            tool = rec.body["tools"][0]
            if queued is not None:
                tool_input = queued.tool_input
            elif self.is_adversarial:
                tool_input = adversarial_tool_input(rec)
            else:
                tool_input = self.tool_input(rec.source_ids)
            content: list[dict[str, Any]] = [
                {
                    "type": "tool_use",
                    "id": f"toolu_{len(self.requests)}",
                    "name": tool["name"],
                    "input": tool_input,
                }
            ]
            self._send_message(h, model, content, "tool_use", rec)
            return
        if queued is not None:
            text = queued.text
        elif self.is_adversarial:
            text = adversarial_answer(rec)
        else:
            text = self.answer(rec.source_ids)
        if rec.streamed:
            self._stream(h, model, text, rec)
        else:
            self._send_message(h, model, [{"type": "text", "text": text}], "end_turn", rec)

    # --- usage -----------------------------------------------------------------------------------

    @staticmethod
    def tokens(text: str) -> int:
        """The fake's token count of a text: one token per four characters (at least one for any text)."""
        return math.ceil(len(text) / 4)

    def usage(self, rec: RecordedRequest, output: str) -> dict[str, Any]:
        """The ``usage`` of an answer ``output`` to ``rec``, counting and updating the fake's prompt cache."""
        body = rec.body
        model = str(body.get("model", "claude-fake"))
        tools = json.dumps(body.get("tools") or [], sort_keys=True)
        system = body.get("system") or []
        blocks = [{"type": "text", "text": system}] if isinstance(system, str) else list(system)
        last_mark = max((i for i, b in enumerate(blocks) if b.get("cache_control")), default=-1)
        prefix = tools + "".join(str(b.get("text", "")) for b in blocks[: last_mark + 1])
        whole = tools + "".join(str(b.get("text", "")) for b in blocks) + json.dumps(body.get("messages"))
        total = self.tokens(whole)
        created = read = 0
        prefix_tokens = self.tokens(prefix)
        if last_mark >= 0 and prefix_tokens >= self.cache_min_tokens:
            with self._lock:
                if (model, prefix) in self._cached:
                    read = prefix_tokens
                else:
                    self._cached.add((model, prefix))
                    created = prefix_tokens
        usage = {
            "input_tokens": total - created - read,
            "output_tokens": max(1, self.tokens(output)),
            "cache_creation_input_tokens": created,
            "cache_read_input_tokens": read,
            "cache_creation": {"ephemeral_5m_input_tokens": created, "ephemeral_1h_input_tokens": 0},
            "service_tier": "standard",
        }
        with self._lock:
            self.usages.append((model, usage))
        return usage

    def _send_message(
        self,
        h: BaseHTTPRequestHandler,
        model: str,
        content: list[dict[str, Any]],
        stop_reason: str,
        rec: RecordedRequest,
    ) -> None:
        if self.response_delay_s and any(b.get("type") == "text" for b in content):
            time.sleep(self.response_delay_s)  # a slow answer (tool calls: summary, support check, stay prompt)
        output = "".join(
            b["text"] if b.get("type") == "text" else json.dumps(b.get("input"), sort_keys=True) for b in content
        )
        payload = {
            "id": f"msg_{len(self.requests)}",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": content,
            "stop_reason": stop_reason,
            "stop_sequence": None,
            "usage": self.usage(rec, output),
        }
        send_json(h, 200, payload)

    def pieces(self, text: str) -> list[str]:
        """How a text is split into ``text_delta`` events: ``chunk_chars`` characters, or ``chunk_words`` words."""
        if self.chunk_chars:
            return [text[i : i + self.chunk_chars] for i in range(0, len(text), self.chunk_chars)]
        words = re.findall(r"\S+\s*|\s+", text)
        return ["".join(words[i : i + self.chunk_words]) for i in range(0, len(words), self.chunk_words)]

    def _stream(self, h: BaseHTTPRequestHandler, model: str, text: str, rec: RecordedRequest) -> None:
        usage = self.usage(rec, text)
        h.send_response(200)
        h.send_header("content-type", "text/event-stream")
        h.send_header("cache-control", "no-cache")
        h.end_headers()

        def frame(event: str, data: dict[str, Any]) -> None:
            h.wfile.write(f"event: {event}\ndata: {json.dumps(data)}\n\n".encode())
            h.wfile.flush()

        frame(
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": f"msg_{len(self.requests)}",
                    "type": "message",
                    "role": "assistant",
                    "model": model,
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": {**usage, "output_tokens": 1},
                },
            },
        )
        frame(
            "content_block_start",
            {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        )
        pieces = self.pieces(text)
        for piece in pieces:
            if self.token_delay_s:
                time.sleep(self.token_delay_s)
            frame(
                "content_block_delta",
                {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": piece}},
            )
        frame("content_block_stop", {"type": "content_block_stop", "index": 0})
        frame(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                "usage": {"output_tokens": usage["output_tokens"]},
            },
        )
        frame("message_stop", {"type": "message_stop"})


def leaks(payload: Any, allowed: set[str], path: str = "$") -> list[str]:
    """Every place in a JSON payload (what a client receives) that shows an id outside ``allowed``.

    Walks every string: any citation the gate's grammar recognises must be allowed, and no made-up number of
    :data:`FABRICATED` may appear in any form. ``citation_check`` is skipped: reporting removed ids is its job.
    """
    from shared.citations import cited_ids  # the fakes stay importable without the product on the path

    found: list[str] = []
    if isinstance(payload, dict):
        for k, v in payload.items():
            if k != "citation_check":
                found += leaks(v, allowed, f"{path}.{k}")
    elif isinstance(payload, list):
        for i, v in enumerate(payload):
            found += leaks(v, allowed, f"{path}[{i}]")
    elif isinstance(payload, str):
        bad = [c for c in cited_ids(payload) if c not in allowed]
        bad += [n for n in FABRICATED_NUMBERS if n in payload]
        found += [f"{path}: {b}" for b in dict.fromkeys(bad)]
    return found
