"""Event contracts: JSON Schema per event version, AsyncAPI per service, and a compatibility check.

``evidentia docs`` writes ``docs/schemas/<Event>.v<N>.json`` and ``docs/asyncapi/<service>.json``.
``tests/unit/shared/test_event_contracts.py`` fails when a model changes incompatibly (a field removed,
retyped, or newly required) without a ``schema_version`` bump, or when the docs are out of date.
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any

from shared.events import PIPELINE_EVENTS, Event
from shared.registry import EVENT_SERVICES

SERVICES = EVENT_SERVICES


def version_of(model: type[Event]) -> int:
    return int(model.model_fields["schema_version"].default)


def schema_of(model: type[Event]) -> dict[str, Any]:
    return model.model_json_schema(mode="serialization")


def schema_path(docs: Path, model: type[Event]) -> Path:
    return docs / "schemas" / f"{model.__name__}.v{version_of(model)}.json"


def _resolve(schema: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        return dict(schema.get("$defs", {}).get(ref.split("/")[-1], {}))
    return node


def _types(schema: dict[str, Any], node: dict[str, Any]) -> set[str]:
    node = _resolve(schema, node)
    if "anyOf" in node:
        out: set[str] = set()
        for n in node["anyOf"]:
            out |= _types(schema, n)
        return out
    if "type" in node:
        return {str(node["type"])}
    if "const" in node:
        return {f"const:{node['const']}"}
    if "enum" in node:
        return {f"enum:{v}" for v in node["enum"]}
    return {"object" if "properties" in node else "any"}


def incompatible_changes(old: dict[str, Any], new: dict[str, Any], path: str = "") -> list[str]:
    """What in ``new`` would break a consumer of ``old`` (or a producer still writing ``old``)."""
    problems: list[str] = []
    old_props: dict[str, Any] = old.get("properties", {})
    new_props: dict[str, Any] = new.get("properties", {})
    for name in old_props:
        if name not in new_props:
            problems.append(f"{path}{name}: removed")
    for name in set(new.get("required", [])) - set(old.get("required", [])):
        if name != "schema_version" or name not in old_props:
            problems.append(f"{path}{name}: newly required")
    for name, old_node in old_props.items():
        if name not in new_props or name == "schema_version":
            continue
        old_t, new_t = _types(old, old_node), _types(new, new_props[name])
        if not old_t <= new_t and "any" not in new_t:
            problems.append(f"{path}{name}: type {sorted(old_t)} -> {sorted(new_t)}")
        o, n = _resolve(old, old_node), _resolve(new, new_props[name])
        if "properties" in o and "properties" in n:
            problems += incompatible_changes(
                {**o, "$defs": old.get("$defs", {})}, {**n, "$defs": new.get("$defs", {})}, f"{path}{name}."
            )
    return problems


def write_schemas(docs: Path) -> list[Path]:
    written = []
    for model in PIPELINE_EVENTS:
        path = schema_path(docs, model)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(schema_of(model), indent=2, sort_keys=True) + "\n")
        written.append(path)
    return written


def asyncapi_of(service: str) -> dict[str, Any]:
    module = importlib.import_module(f"services.{service}.app")
    spec = module.app.schema.to_specification()
    data: dict[str, Any] = json.loads(spec.to_json())
    return data


def write_asyncapi(docs: Path) -> list[Path]:
    written = []
    for service in SERVICES:
        path = docs / "asyncapi" / f"{service}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(asyncapi_of(service), indent=2, sort_keys=True) + "\n")
        written.append(path)
    return written
