"""ONNX backend: onnxruntime + the ``tokenizers`` library, for the folders ``evidentia models fetch`` makes.

Why not ``SentenceTransformer(folder, backend="onnx")``: that path imports ``optimum.onnxruntime``
(the ``sentence-transformers[onnx]`` extra, i.e. optimum-onnx), which pins ``transformers<4.58``
while this project runs transformers 5. The folder is still written in the layout sentence-transformers
reads (``onnx/model.onnx``, ``tokenizer.json``, ``modules.json``, ``1_Pooling/config.json``...), so an
environment with optimum loads it that way too; here we read the same files ourselves: tokenise with
``tokenizers`` (truncated to ``max_seq_length``), run the graph, pool (CLS or mean over the attention
mask, per ``1_Pooling/config.json``) and L2-normalise, which is exactly what the Transformer, Pooling
and Normalize modules do.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from shared.embedding.base import (
    BaseEmbedder,
    EmbedderError,
    FloatArray,
    Pooling,
    TokenIds,
    l2_normalise,
    length_sorted_batches,
    pad_ids,
    truncate_ids,
)

log = logging.getLogger(__name__)


def read_pooling(folder: Path) -> Pooling:
    """The pooling a sentence-transformers folder declares (``1_Pooling/config.json``); mean if none."""
    path = folder / "1_Pooling" / "config.json"
    if not path.is_file():
        return "mean"
    cfg: dict[str, Any] = json.loads(path.read_text())
    mode = cfg.get("pooling_mode")
    if mode in ("cls", "mean"):
        return "cls" if mode == "cls" else "mean"
    if cfg.get("pooling_mode_cls_token"):
        return "cls"
    if mode is not None or cfg.get("pooling_mode_max_tokens") or cfg.get("pooling_mode_mean_sqrt_len_tokens"):
        raise EmbedderError(f"Unsupported pooling in {path}: only CLS and mean pooling are implemented.")
    return "mean"


def read_max_seq_length(folder: Path, default: int = 512) -> int:
    path = folder / "sentence_bert_config.json"
    if path.is_file():
        value = json.loads(path.read_text()).get("max_seq_length")
        if isinstance(value, int) and value > 0:
            return value
    return default


def onnx_file(folder: Path) -> Path | None:
    """The ONNX graph of a model folder, if it has one."""
    for candidate in (folder / "onnx" / "model.onnx", folder / "model.onnx"):
        if candidate.is_file():
            return candidate
    return None


def cpu_count() -> int:
    """CPUs this process may run on (its affinity mask), not the machine's."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


class OnnxEmbedder(BaseEmbedder):
    """An embedder that runs an ONNX export with onnxruntime."""

    _session: Any
    _tokenizer: Any
    _counter: Any

    def _load(self) -> None:
        import onnxruntime as ort
        from tokenizers import Tokenizer

        folder = Path(self.config.source).expanduser()
        graph = onnx_file(folder)
        tok_path = folder / "tokenizer.json"
        if graph is None or not tok_path.is_file():
            raise EmbedderError(f"{folder} is not an ONNX model folder (needs onnx/model.onnx and tokenizer.json).")
        self._pooling: Pooling = self.config.pooling or read_pooling(folder)
        max_len = self.config.max_seq_length or read_max_seq_length(folder)
        self._max_seq_length = max_len

        self._tokenizer = Tokenizer.from_file(str(tok_path))
        self._tokenizer.no_padding()
        self._tokenizer.enable_truncation(max_length=max_len)
        self._counter = Tokenizer.from_file(str(tok_path))
        self._counter.no_padding()
        self._counter.no_truncation()
        pad = self._tokenizer.token_to_id("[PAD]")
        self._pad_id = int(pad) if pad is not None else 0

        opts = ort.SessionOptions()
        opts.intra_op_num_threads = self.config.threads or cpu_count()
        opts.inter_op_num_threads = 1
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        providers = ["CPUExecutionProvider"]
        if self.device.startswith("cuda"):
            if "CUDAExecutionProvider" in ort.get_available_providers():
                index = int(self.device.split(":", 1)[1]) if ":" in self.device else 0
                providers = [("CUDAExecutionProvider", {"device_id": index}), "CPUExecutionProvider"]  # type: ignore[list-item]
            else:
                log.warning("onnxruntime has no CUDA provider here; %s runs on the CPU", self.name)
                self.device = "cpu"
        self._session = ort.InferenceSession(str(graph), sess_options=opts, providers=providers)
        self._inputs = {i.name for i in self._session.get_inputs()}
        self._output = self._session.get_outputs()[0].name
        out_dim = self._session.get_outputs()[0].shape[-1]
        if isinstance(out_dim, int):
            if self._dim is not None and self._dim != out_dim:
                raise EmbedderError(f"{graph} makes {out_dim}-d vectors, not the expected {self._dim}.")
            self._dim = out_dim
        elif self._dim is None:
            self._dim = int(self._run_batch([[self._pad_id]]).shape[1])
        log.info("embedding model %s (ONNX, %s pooling) loaded from %s", self.name, self._pooling, folder)

    def _token_ids(self, texts: list[str]) -> list[list[int]]:
        return [list(enc.ids) for enc in self._tokenizer.encode_batch(texts, add_special_tokens=True)]

    def _count_tokens(self, text: str) -> int:
        return len(self._counter.encode(text, add_special_tokens=False).ids)

    def _encode(self, texts: list[str], batch_size: int) -> FloatArray:
        return self._encode_ids(self._token_ids(texts), batch_size)

    def _run_batch(self, batch: Sequence[TokenIds]) -> FloatArray:
        input_ids, mask = pad_ids(batch, self._pad_id)
        feeds = {"input_ids": input_ids, "attention_mask": mask}
        if "token_type_ids" in self._inputs:
            feeds["token_type_ids"] = np.zeros_like(input_ids)
        hidden = np.asarray(self._session.run([self._output], feeds)[0], dtype=np.float32)
        if self._pooling == "cls":
            pooled = hidden[:, 0, :]
        else:
            m = mask[:, :, None].astype(np.float32)
            pooled = (hidden * m).sum(axis=1) / np.maximum(m.sum(axis=1), 1e-9)
        return l2_normalise(pooled)

    def _encode_ids(self, ids: Sequence[TokenIds], batch_size: int) -> FloatArray:
        limit = self.max_seq_length
        ids = [truncate_ids(seq, limit) for seq in ids]
        out = np.empty((len(ids), self.dim), dtype=np.float32)
        for batch in length_sorted_batches([len(seq) for seq in ids], batch_size):
            out[batch] = self._run_batch([ids[i] for i in batch])
        return out
