"""Where a model folder keeps its ONNX graph, whether the graph can be read, and whether a copy derived from it
is current: read by the ONNX backend, the factory, the FP16 converter and the torch export (its own module so
that the converter, which the backend imports, need not import the backend)."""

from __future__ import annotations

import importlib.util
from pathlib import Path


def onnx_file(folder: Path) -> Path | None:
    """The ONNX graph of a model folder, if it has one."""
    for candidate in (folder / "onnx" / "model.onnx", folder / "model.onnx"):
        if candidate.is_file():
            return candidate
    return None


def onnx_available() -> bool:
    """Whether a graph's contents can be read and rewritten: the ``onnx`` package is installed (the
    ``embedder-gpu`` and ``dev`` extras)."""
    return importlib.util.find_spec("onnx") is not None


def is_fresh(copy: Path, graph: Path) -> bool:
    """Whether ``copy``, derived from ``graph``, exists and is not older than it."""
    return copy.is_file() and copy.stat().st_mtime_ns >= graph.stat().st_mtime_ns
