"""Where a model folder keeps its ONNX graph: read by the ONNX backend, the factory and the FP16 converter
(its own module so that the converter, which the backend imports, need not import the backend)."""

from __future__ import annotations

from pathlib import Path


def onnx_file(folder: Path) -> Path | None:
    """The ONNX graph of a model folder, if it has one."""
    for candidate in (folder / "onnx" / "model.onnx", folder / "model.onnx"):
        if candidate.is_file():
            return candidate
    return None
