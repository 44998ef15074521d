"""Every event's JSON Schema is committed under docs/schemas; an incompatible change needs a version bump."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from docgen.contracts import incompatible_changes, schema_of, schema_path
from shared.events import PIPELINE_EVENTS, Event

DOCS = Path(__file__).resolve().parents[3] / "docs"


@pytest.mark.parametrize("model", PIPELINE_EVENTS, ids=lambda m: m.__name__)
def test_event_schema_is_committed_and_compatible(model: type[Event]) -> None:
    path = schema_path(DOCS, model)
    assert path.exists(), f"{path} missing: run `evidentia docs` (a new event or a schema_version bump)"
    committed = json.loads(path.read_text())
    current = schema_of(model)
    problems = incompatible_changes(committed, current)
    assert not problems, (
        f"{model.__name__} changed incompatibly without a schema_version bump: {problems}. "
        "Bump schema_version (consumers must then accept both versions) and run `evidentia docs`."
    )
    assert committed == json.loads(json.dumps(current, sort_keys=True)), (
        "docs/schemas out of date: run `evidentia docs`"
    )


@pytest.mark.parametrize("model", PIPELINE_EVENTS, ids=lambda m: m.__name__)
def test_every_event_carries_version_and_trace_id(model: type[Event]) -> None:
    fields = model.model_fields
    assert "schema_version" in fields and "trace_id" in fields
    assert isinstance(fields["schema_version"].default, int)


def test_the_checker_catches_removed_retyped_and_newly_required_fields() -> None:
    old = {
        "properties": {"a": {"type": "string"}, "b": {"type": "integer"}, "c": {"type": "string"}},
        "required": ["a"],
    }
    new = {
        "properties": {"a": {"type": "integer"}, "c": {"type": "string"}, "d": {"type": "string"}},
        "required": ["a", "c"],
    }
    problems = incompatible_changes(old, new)
    assert "b: removed" in problems
    assert "c: newly required" in problems
    assert any(p.startswith("a: type") for p in problems)
    # Adding an optional field is compatible.
    assert incompatible_changes(old, {**old, "properties": {**old["properties"], "e": {"type": "string"}}}) == []
