"""The half-precision (FP16) copy of an ONNX model for the GPU, and the check that it keeps the CPU's vectors.

:func:`fp16_graph` converts with ONNX Runtime's own converter
(``onnxruntime.transformers.float16.convert_float_to_float16``, ``keep_io_types=True``): weights and
activations in half precision, while the inputs (int64 ids) and the output (float32 token states) keep their
types, so the embedder feeds and reads the copy exactly as the FP32 graph. The converter needs the ``onnx``
package, which only the ``embedder-gpu`` extra installs (:func:`fp16_available`).

The copy is cached beside the graph (``onnx/model_fp16.onnx``) when that folder is writable, else in the
temporary directory; the GPU image makes it at build time (``python -m shared.embedding.fp16 MODEL``), as
converting bge-small takes ~10 s of CPU.

FP16 is used only where it keeps the vectors: :data:`FP16_TOLERANCE` is the largest ``1 - cosine`` allowed
between a probe passage's FP16 vector on the device and its FP32 vector on the CPU
(:meth:`shared.embedding.onnx.OnnxEmbedder` runs the check at load and keeps FP32 when it fails).
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import os
import tempfile
from pathlib import Path

import numpy as np
import numpy.typing as npt

from shared.embedding.graph_file import is_fresh, onnx_available

log = logging.getLogger(__name__)

FP16_TOLERANCE = 1e-2
FP16_NAME = "model_fp16.onnx"
PROBE_TEXTS = (
    "Aspirin lowers the risk of a second myocardial infarction in adults with coronary artery disease.",
    "Metformin is the first-line drug for type 2 diabetes; lactic acidosis is a rare adverse effect.",
    "In this randomised controlled trial of 1,204 patients, early mobilisation after hip fracture surgery "
    "reduced 30-day mortality (hazard ratio 0.71, 95% CI 0.55-0.92) without more falls.",
    "BRCA1 and BRCA2 germline mutations raise the lifetime risk of breast and ovarian cancer.",
    "What is the first-line treatment for community-acquired pneumonia in children?",
    "Vaccination",
    "Serum ferritin below 30 ng/mL indicates iron deficiency even when haemoglobin is normal; oral iron "
    "every other day is absorbed better than daily doses, and intravenous iron is reserved for intolerance, "
    "malabsorption or severe anaemia late in pregnancy.",
    "The cohort (n = 58,000) was followed for 12 years; adjusted odds ratios are given in Table 3.",
)
"""Passages of different lengths and kinds whose FP16 vectors must stay within :data:`FP16_TOLERANCE`."""


def fp16_available() -> bool:
    """Whether the converter can run: the ``onnx`` package is installed (the ``embedder-gpu`` extra)."""
    return onnx_available()


def fp16_path(graph: Path) -> Path:
    """Where the FP16 copy of ``graph`` is kept: beside it when a copy is there (made at the image's build, read
    by a user who may not write there) or its folder is writable, else in the temp dir."""
    beside = graph.with_name(FP16_NAME)
    if is_fresh(beside, graph) or os.access(graph.parent, os.W_OK):
        return beside
    stat = graph.stat()
    key = hashlib.sha256(f"{graph.resolve()}:{stat.st_size}:{stat.st_mtime_ns}".encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / "evidentia-fp16" / f"{key}.onnx"


def fp16_graph(graph: Path) -> Path:
    """The FP16 copy of the FP32 ONNX file ``graph``, converted now unless a copy newer than it exists."""
    target = fp16_path(graph)
    if is_fresh(target, graph):
        return target
    import onnx
    from onnxruntime.transformers.float16 import convert_float_to_float16

    log.info("converting %s to FP16 (once; kept in %s)", graph, target)
    model = convert_float_to_float16(onnx.load(str(graph)), keep_io_types=True)
    target.parent.mkdir(parents=True, exist_ok=True)
    # Written aside then renamed: replicas starting together never read a half-written file.
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".fp16-", suffix=".onnx")
    os.close(fd)
    try:
        onnx.save(model, tmp)
        os.replace(tmp, target)
    finally:
        Path(tmp).unlink(missing_ok=True)
    return target


def worst_cosine(a: npt.NDArray[np.floating], b: npt.NDArray[np.floating]) -> float:
    """The smallest cosine between rows ``a[i]`` and ``b[i]`` (1.0 for no rows)."""
    if not len(a):
        return 1.0
    a64, b64 = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    dots = (a64 * b64).sum(axis=1)
    norms = np.linalg.norm(a64, axis=1) * np.linalg.norm(b64, axis=1)
    return float((dots / np.maximum(norms, 1e-12)).min())


def main(argv: list[str] | None = None) -> None:
    """``python -m shared.embedding.fp16 [MODEL]``: make the FP16 copy of a fetched ONNX model (the GPU image)."""
    from shared.embedding.catalogue import known_model
    from shared.embedding.fetch import model_folder
    from shared.embedding.graph_file import onnx_file
    from shared.settings import EmbeddingSettings

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("model", nargs="?", default="bge-small-en-v1.5", help="a known model or a model folder")
    parser.add_argument("--models-dir", default=None, help="where fetched models live (default: the setting)")
    args = parser.parse_args(argv)
    known = known_model(args.model)
    models_dir = args.models_dir or EmbeddingSettings().models_dir
    folder = model_folder(known, models_dir) if known is not None else Path(args.model)
    graph = onnx_file(folder)
    if graph is None:
        raise SystemExit(f"{folder} holds no ONNX graph (onnx/model.onnx)")
    logging.basicConfig(level=logging.INFO)
    print(fp16_graph(graph))


if __name__ == "__main__":
    main()
