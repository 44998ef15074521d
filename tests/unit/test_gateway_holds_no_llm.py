"""The gateway is an HTTP edge: it holds no Anthropic client and makes no Claude call. Every LLM step runs in
the synthesizer (services/synthesizer/steps.py), which the gateway asks over Kafka (``llm.steps.requests``).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GATEWAY = ROOT / "services" / "gateway"
#: What only a service that calls Claude imports from shared.llm.
CALLERS = frozenset({"create_message", "stream_message", "anthropic_client"})


def llm_imports(source: str) -> list[str]:
    """What ``source`` imports that calls Claude: the anthropic SDK, or shared.llm's call functions."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.split(".")[0] == "anthropic"]
        elif isinstance(node, ast.ImportFrom) and node.module is not None:
            if node.module.split(".")[0] == "anthropic":
                found.append(node.module)
            elif node.module == "shared.llm":
                found += [f"shared.llm.{a.name}" for a in node.names if a.name in CALLERS]
            elif node.module == "shared" and any(a.name == "llm" for a in node.names):
                found.append("shared.llm")
    return found


def test_the_scan_sees_each_way_of_importing_a_caller() -> None:
    assert llm_imports("import anthropic") == ["anthropic"]
    assert llm_imports("from anthropic.types import Message") == ["anthropic.types"]
    assert llm_imports("from shared.llm import absorb, create_message") == ["shared.llm.create_message"]
    assert llm_imports("from shared.llm import UsageLedger, absorb") == []


@pytest.mark.parametrize("path", sorted(GATEWAY.rglob("*.py")), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_gateway_module_calls_claude(path: Path) -> None:
    assert llm_imports(path.read_text()) == [], f"{path.relative_to(ROOT)}: the gateway asks the synthesizer instead"
