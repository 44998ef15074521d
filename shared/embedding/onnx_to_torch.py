"""The weights of an ONNX export of a BERT encoder as a PyTorch model folder, for the torch backend.

The catalogue's models (``bge-small-en-v1.5``, ``e5-small-v2``...) are ONNX graphs exported from the Hugging
Face BERT code: their initializers keep the module names (``encoder.layer.0.attention.self.query.bias``) except
the dense layers' weights, which the exporter stores transposed under generated names (``onnx::MatMul_1234``)
and which are found here from the graph (the ``MatMul`` whose output the named bias is added to). The
architecture's sizes are read from the weights' shapes; the head count and the layer-norm epsilon from the
graph's constants. :func:`export_torch_folder` writes a sentence-transformers folder (``config.json``,
``model.safetensors``, the tokenizer and the pooling modules copied) that the torch backend loads like any
other, so the same pinned weights run wherever PyTorch runs: on CUDA through the PyTorch build of the machine
when ONNX Runtime's CUDA build cannot be installed (its CUDA 12 wheels on a CUDA 13 machine, say).

The export is checked before it is kept: the folder's model and ONNX Runtime's run of the graph embed
:data:`~shared.embedding.fp16.PROBE_TEXTS` on the CPU, and an export whose vectors differ by more than
:data:`EXPORT_TOLERANCE` (``1 - cosine``) is refused. Reading the graph needs the ``onnx`` package (the
``embedder-gpu`` extra; the ``dev`` extra for the tests).

    python -m shared.embedding.onnx_to_torch models/bge-small-en-v1.5 [--out DIR] [--fp16]
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from shared.embedding.base import EmbedderError
from shared.embedding.graph_file import is_fresh, onnx_available, onnx_file

log = logging.getLogger(__name__)

EXPORT_TOLERANCE = 1e-5
"""Largest ``1 - cosine`` between a probe's vector from the exported folder and from the graph (both FP32)."""
FP16_EXPORT_TOLERANCE = 1e-3
"""The same for an export whose weights are stored in half precision (checked with those weights in FP32)."""
TORCH_FOLDER = "torch"
"""The export's folder beside the graph (``MODEL/torch``) when the model's folder is writable."""
_COPIED = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.txt",
    "modules.json",
    "sentence_bert_config.json",
    "config_sentence_transformers.json",
    "evidentia.json",
)
_MODULE_DIRS = ("1_Pooling", "2_Normalize")
_LAYER = re.compile(r"^encoder\.layer\.(\d+)\.")


def _require_onnx() -> None:
    if not onnx_available():
        raise EmbedderError(
            "running an ONNX export on the torch backend reads the graph's weights with the `onnx` package, "
            "which is not installed (it is in the `embedder-gpu` extra; or `pip install onnx`)"
        )


def _constant(node: Any) -> npt.NDArray[Any] | None:
    from onnx import numpy_helper

    for attr in node.attribute:
        if attr.name == "value":
            return np.asarray(numpy_helper.to_array(attr.t))
    return None


def _heads(graph: Any, producers: dict[str, Any]) -> int:
    """The attention heads: the third dimension of the (batch, sequence, heads, head size) reshape of a query."""
    for node in graph.node:
        if node.op_type != "Reshape" or "/attention/self/" not in node.name:
            continue
        shape = producers.get(node.input[1])
        if shape is None or shape.op_type != "Concat" or len(shape.input) != 4:
            continue
        part = producers.get(shape.input[2])
        while part is not None and part.op_type == "Unsqueeze":
            part = producers.get(part.input[0])
        value = _constant(part) if part is not None and part.op_type == "Constant" else None
        if value is not None and value.size == 1:
            return int(value.reshape(-1)[0])
    raise EmbedderError("the graph's attention reshape (batch, sequence, heads, head size) was not found")


def _layer_norm_eps(graph: Any, producers: dict[str, Any]) -> float:
    """The epsilon added to the variance in the graph's first layer norm (``Add(ReduceMean(...), eps)``)."""
    for node in graph.node:
        if node.op_type != "Add":
            continue
        left, right = (producers.get(name) for name in node.input)
        if left is not None and left.op_type == "ReduceMean" and right is not None and right.op_type == "Constant":
            value = _constant(right)
            if value is not None and value.size == 1:
                return float(value.reshape(-1)[0])
    return 1e-12


def bert_weights(graph_path: Path) -> tuple[dict[str, Any], dict[str, npt.NDArray[np.float32]]]:
    """(``BertConfig`` fields, state dict) of the BERT encoder an ONNX graph holds."""
    _require_onnx()
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(graph_path))
    graph = model.graph
    inits = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    producers = {out: node for node in graph.node for out in node.output}
    consumers: dict[str, list[Any]] = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    state = {name: np.asarray(v, dtype=np.float32) for name, v in inits.items() if name.endswith((".weight", ".bias"))}
    for node in graph.node:
        weight = next((name for name in node.input if name in inits), None)
        if node.op_type != "MatMul" or weight is None:
            continue
        biases = [
            name
            for add in consumers.get(node.output[0], [])
            if add.op_type == "Add"
            for name in add.input
            if name in inits and name.endswith(".bias")
        ]
        if len(biases) != 1:
            raise EmbedderError(
                f"the graph's MatMul {node.name!r} has no single named bias after it: not a BERT export"
            )
        state[biases[0].removesuffix(".bias") + ".weight"] = np.ascontiguousarray(inits[weight].T, dtype=np.float32)
    try:
        vocab, hidden = state["embeddings.word_embeddings.weight"].shape
        config = {
            "architectures": ["BertModel"],
            "model_type": "bert",
            "vocab_size": int(vocab),
            "hidden_size": int(hidden),
            "max_position_embeddings": int(state["embeddings.position_embeddings.weight"].shape[0]),
            "type_vocab_size": int(state["embeddings.token_type_embeddings.weight"].shape[0]),
            "num_hidden_layers": 1 + max(int(m.group(1)) for k in state if (m := _LAYER.match(k))),
            "intermediate_size": int(state["encoder.layer.0.intermediate.dense.weight"].shape[0]),
            "num_attention_heads": _heads(graph, producers),
            "layer_norm_eps": _layer_norm_eps(graph, producers),
            "hidden_act": "gelu",
            "pad_token_id": 0,
        }
    except (KeyError, ValueError) as exc:
        raise EmbedderError(f"{graph_path} does not hold a BERT encoder's weights ({exc})") from exc
    return config, state


def _probe_vectors(folder: Path, texts: list[str]) -> npt.NDArray[np.float32]:
    """The probes' passage vectors from the exported folder on the torch backend (CPU, FP32)."""
    from shared.embedding.base import EmbedderConfig
    from shared.embedding.sentence_transformers import SentenceTransformerEmbedder

    config = EmbedderConfig(name=str(folder), source=str(folder), device="cpu", fp16=False)
    embedder = SentenceTransformerEmbedder(config)
    return np.asarray(embedder.encode_passages(texts), dtype=np.float32)


def _graph_vectors(model_folder: Path, texts: list[str]) -> npt.NDArray[np.float32]:
    """The same from the ONNX graph on ONNX Runtime's CPU provider."""
    from shared.embedding.base import EmbedderConfig
    from shared.embedding.onnx import OnnxEmbedder, read_pooling

    config = EmbedderConfig(
        name=str(model_folder), source=str(model_folder), device="cpu", fp16=False, pooling=read_pooling(model_folder)
    )
    return np.asarray(OnnxEmbedder(config).encode_passages(texts), dtype=np.float32)


def export_torch_folder(model_folder: Path, out: Path, *, fp16: bool = False) -> Path:
    """Write the torch folder of ``model_folder``'s ONNX export to ``out``; checked against the graph first.

    ``fp16`` stores the weights in half precision (half the bytes; the check then runs on the FP32 weights it
    rounds, and the torch backend's own FP16 check on the device still applies).
    """
    from safetensors.numpy import save_file

    from shared.embedding.fp16 import PROBE_TEXTS, worst_cosine

    graph = onnx_file(model_folder)
    if graph is None:
        raise EmbedderError(f"{model_folder} holds no ONNX graph (onnx/model.onnx)")
    config, state = bert_weights(graph)
    staging = Path(tempfile.mkdtemp(prefix=".torch-", dir=out.parent if out.parent.is_dir() else None))
    staging.chmod(0o755)
    try:
        for name in _COPIED:
            if (model_folder / name).is_file():
                shutil.copy2(model_folder / name, staging / name)
        for name in _MODULE_DIRS:
            if (model_folder / name).is_dir():
                shutil.copytree(model_folder / name, staging / name)
        (staging / "config.json").write_text(json.dumps(config, indent=2) + "\n")
        if fp16:
            state = {k: v.astype(np.float16).astype(np.float32) for k, v in state.items()}
        save_file(state, str(staging / "model.safetensors"), metadata={"format": "pt"})
        texts = list(PROBE_TEXTS)
        gap = 1.0 - worst_cosine(_probe_vectors(staging, texts), _graph_vectors(model_folder, texts))
        limit = FP16_EXPORT_TOLERANCE if fp16 else EXPORT_TOLERANCE
        if gap > limit:
            raise EmbedderError(
                f"the torch export of {model_folder} does not reproduce the graph: 1 - cosine {gap:.2e} > {limit:.0e}"
            )
        log.info("torch export of %s checked: largest 1 - cosine %.1e on %d probes", model_folder, gap, len(texts))
        if fp16:
            save_file({k: v.astype(np.float16) for k, v in state.items()}, str(staging / "model.safetensors"))
        if out.exists():
            shutil.rmtree(out)
        staging.rename(out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return out


def torch_folder(model_folder: Path) -> Path:
    """The checked torch export of ``model_folder``, made once and kept (``MODEL/torch``, else a temp folder)."""
    graph = onnx_file(model_folder)
    if graph is None:
        raise EmbedderError(f"{model_folder} holds no ONNX graph (onnx/model.onnx)")
    for out in (model_folder / TORCH_FOLDER, Path(tempfile.gettempdir()) / "evidentia-torch" / model_folder.name):
        if is_fresh(out / "model.safetensors", graph):
            return out
        try:
            out.parent.mkdir(parents=True, exist_ok=True)
            log.info("exporting %s's weights for the torch backend to %s", model_folder, out)
            return export_torch_folder(model_folder, out)
        except PermissionError:
            continue
    raise EmbedderError(f"no writable place for the torch export of {model_folder}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", type=Path, help="A model folder holding onnx/model.onnx.")
    parser.add_argument("--out", type=Path, default=None, help="Where to write (default: MODEL/torch).")
    parser.add_argument("--fp16", action="store_true", help="Store the weights in half precision.")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    out = export_torch_folder(args.model, args.out or args.model / TORCH_FOLDER, fp16=args.fp16)
    print(out)


if __name__ == "__main__":
    main()
