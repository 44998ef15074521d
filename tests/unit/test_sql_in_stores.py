"""Each service's SQL lives in its store modules (``store.py``, ``<what>_store.py``, the gateway's ``store/``
package, or the retriever's search engine, whose lexical, vector, filter and hit modules are its store):
handlers, route and core modules, and the engine's pipeline and rankings, hold no SQL statement in a string
literal.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHECKED_SERVICES = ("fetcher", "parser", "embedder", "retriever", "synthesizer", "gateway")

#: Statement openings, upper case as the project writes SQL (prose such as "update files" does not match).
SQL = re.compile(
    r"\bSELECT\s|\bINSERT\s+INTO\b|\bUPDATE\s+\w+\s+SET\b|\bDELETE\s+FROM\b|\bCREATE\s+(?:TEMP\s+)?(?:TABLE|INDEX)\b"
    r"|\bALTER\s+TABLE\b|\bDROP\s+(?:TABLE|INDEX)\b|\bTRUNCATE\s"
)


def _docstrings(tree: ast.Module) -> set[int]:
    """ids of the constants that are module, class or function docstrings (prose, not SQL)."""
    found: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


def sql_literals(source: str) -> list[tuple[int, str]]:
    """``(line, text)`` of every string literal (f-string parts included) that holds a SQL statement."""
    tree = ast.parse(source)
    docs = _docstrings(tree)
    return sorted(
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in docs
        and SQL.search(node.value)
    )


ENGINE = ROOT / "services" / "retriever" / "engine"
#: The search engine's modules that compose or rank and read the store only through the others.
ENGINE_WITHOUT_SQL = ("pipeline.py", "request.py", "config.py", "memo.py", "queries.py", "ranking", "stages")


def _is_store(path: Path) -> bool:
    if ENGINE in path.parents:
        return path.relative_to(ENGINE).parts[0] not in ENGINE_WITHOUT_SQL
    return "store" in path.stem or "store" in path.parent.name


def _modules() -> list[Path]:
    return sorted(
        path
        for service in CHECKED_SERVICES
        for path in (ROOT / "services" / service).rglob("*.py")
        if not _is_store(path)
    )


def test_the_check_reads_every_service() -> None:
    modules = _modules()
    assert {p.relative_to(ROOT / "services").parts[0] for p in modules} == set(CHECKED_SERVICES)
    assert ROOT / "services" / "retriever" / "handlers.py" in modules
    assert ENGINE / "pipeline.py" in modules and ENGINE / "ranking" / "fusion.py" in modules
    assert ENGINE / "stages" / "retrieve.py" in modules
    assert ROOT / "services" / "gateway" / "routes" / "ask.py" in modules
    assert not any(p.parent.name == "store" for p in modules)
    assert not any(p.stem.endswith("store") for p in modules)


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_sql_outside_the_store_modules(path: Path) -> None:
    found = sql_literals(path.read_text(encoding="utf-8"))
    assert not found, f"SQL in {path.relative_to(ROOT)} (move it to the service's store module): " + "; ".join(
        f"line {line}: {text.strip()[:60]!r}" for line, text in found
    )


def test_the_detector_finds_statements_in_strings_and_f_strings_but_not_in_docstrings() -> None:
    source = '''
"""Reads PubMed update files; SELECT the best."""
async def ready(pool):
    """Whether SELECT 1 answers."""
    await pool.execute("UPDATE ingest_jobs " "SET state = 'failed' WHERE job_id = $1", "j")
    await pool.fetch(f"SELECT * FROM {table} WHERE x = $1", 1)
    await pool.execute("DELETE FROM chunks WHERE document_id = $1", "d")
    label = "update the index"
'''
    found = sql_literals(source)
    assert [line for line, _ in found] == [5, 6, 7]
    assert found[0][1].startswith("UPDATE ingest_jobs SET")
