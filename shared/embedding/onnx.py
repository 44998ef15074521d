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
import numpy.typing as npt

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
from shared.embedding.fp16 import FP16_TOLERANCE, PROBE_TEXTS, fp16_available, fp16_graph, worst_cosine
from shared.embedding.graph_file import onnx_file
from shared.embedding.providers import (
    auto_device,
    device_index,
    load_cuda_libraries,
    requested_providers,
    settle_device,
    wants_cuda,
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


def cpu_count() -> int:
    """CPUs this process may run on (its affinity mask), not the machine's."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


class OnnxEmbedder(BaseEmbedder):
    """An embedder that runs an ONNX export with onnxruntime, on the CPU or on CUDA (FP16 where it is exact enough).

    The device: ``cpu``; ``cuda``/``cuda:N``, refused with :class:`~shared.embedding.providers.DeviceUnavailable`
    when the CUDA provider does not load; ``auto``, CUDA when this onnxruntime has the provider and it loads,
    else the CPU. Inputs are bound to the session (I/O binding) and the output copied back once per batch;
    the token-type ids are views of one zero buffer allocated at load.
    """

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

        available = list(ort.get_available_providers())
        device = auto_device(available) if self.device == "auto" else self.device
        if wants_cuda(device):
            load_cuda_libraries(ort)
        session = self._new_session(ort, graph, device)
        active = list(session.get_providers())
        self.device = settle_device(
            device, required=self.config.device_required, active=active, available=available, model=self.name
        )
        self._session = session
        self.provider = active[0]
        self._io_device = "cuda" if wants_cuda(self.device) else "cpu"
        self._device_id = device_index(self.device) if wants_cuda(self.device) else 0
        self._inputs = {i.name for i in session.get_inputs()}
        self._output = session.get_outputs()[0].name
        self._zeros = np.zeros(max(1, self.batch_size) * max_len, dtype=np.int64)
        out_dim = session.get_outputs()[0].shape[-1]
        if isinstance(out_dim, int):
            if self._dim is not None and self._dim != out_dim:
                raise EmbedderError(f"{graph} makes {out_dim}-d vectors, not the expected {self._dim}.")
            self._dim = out_dim
        elif self._dim is None:
            self._dim = int(self._run_batch([[self._pad_id]]).shape[1])
        fp16 = self.config.fp16 if self.config.fp16 is not None else wants_cuda(self.device)
        if fp16:
            self._use_fp16(ort, graph)
        log.info(
            "embedding model %s (ONNX, %s pooling) loaded from %s on %s: %s, %s",
            self.name,
            self._pooling,
            folder,
            self.device,
            self.provider,
            self.precision,
        )

    def _new_session(self, ort: Any, graph: Path, device: str) -> Any:
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = self.config.threads or cpu_count()
        opts.inter_op_num_threads = 1
        # ONNX Runtime's threads spin between operations by default: fast for one caller with cores to itself,
        # CPU taken from the search (or PostgreSQL) sharing them otherwise.
        opts.add_session_config_entry("session.intra_op.allow_spinning", "1" if self.config.spin_wait else "0")
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        return ort.InferenceSession(str(graph), sess_options=opts, providers=requested_providers(device))

    def _use_fp16(self, ort: Any, graph: Path) -> None:
        """Switch to the FP16 copy of ``graph`` if its vectors of :data:`PROBE_TEXTS` on this device stay within
        :data:`FP16_TOLERANCE` (1 - cosine) of the FP32 graph's on the CPU; else keep FP32 and say why."""
        if not fp16_available():
            message = "FP16 needs the `onnx` package (the embedder-gpu extra)"
            if self.config.fp16:  # asked for explicitly (EVIDENTIA_EMBEDDING_FP16=true), not the CUDA default
                raise EmbedderError(f"{message}; install it or set EVIDENTIA_EMBEDDING_FP16=false.")
            log.warning("%s; %s runs in FP32", message, self.name)
            return
        half = self._new_session(ort, fp16_graph(graph), self.device)
        reference = self._session if self._io_device == "cpu" else self._new_session(ort, graph, "cpu")
        probes = self._token_ids(list(PROBE_TEXTS))
        want = self._run_on(reference, probes, "cpu", 0)
        got = self._run_on(half, probes, self._io_device, self._device_id)
        worst = worst_cosine(want, got)
        if 1.0 - worst > FP16_TOLERANCE:
            log.warning(
                "%s in FP16 on %s moves a probe vector to cosine %.5f of the CPU's FP32 one (allowed: %.5f); "
                "running FP32",
                self.name,
                self.device,
                worst,
                1.0 - FP16_TOLERANCE,
            )
            return
        self._session = half
        self.precision = "fp16"
        log.info("%s runs in FP16 on %s (worst probe cosine to the CPU's FP32: %.6f)", self.name, self.device, worst)

    def _token_ids(self, texts: list[str]) -> list[list[int]]:
        return [list(enc.ids) for enc in self._tokenizer.encode_batch(texts, add_special_tokens=True)]

    def _count_tokens(self, text: str) -> int:
        return len(self._counter.encode(text, add_special_tokens=False).ids)

    def _encode(self, texts: list[str], batch_size: int) -> FloatArray:
        return self._encode_ids(self._token_ids(texts), batch_size)

    def _run_batch(self, batch: Sequence[TokenIds]) -> FloatArray:
        return self._run_on(self._session, batch, self._io_device, self._device_id)

    def _run_on(self, session: Any, batch: Sequence[TokenIds], io_device: str, device_id: int) -> FloatArray:
        """Pooled, normalised vectors of ``batch`` from ``session``: inputs bound from host arrays (copied once to
        the device), the token states bound on the session's device and copied back once."""
        input_ids, mask = pad_ids(batch, self._pad_id)
        binding = session.io_binding()
        binding.bind_cpu_input("input_ids", input_ids)
        binding.bind_cpu_input("attention_mask", mask)
        if "token_type_ids" in self._inputs:
            binding.bind_cpu_input("token_type_ids", self._token_types(input_ids.shape))
        binding.bind_output(self._output, io_device, device_id)
        session.run_with_iobinding(binding)
        hidden = np.asarray(binding.copy_outputs_to_cpu()[0], dtype=np.float32)
        if self._pooling == "cls":
            pooled = hidden[:, 0, :]
        else:
            m = mask[:, :, None].astype(np.float32)
            pooled = (hidden * m).sum(axis=1) / np.maximum(m.sum(axis=1), 1e-9)
        return l2_normalise(pooled)

    def _token_types(self, shape: tuple[int, ...]) -> npt.NDArray[np.int64]:
        """All-zero token types of ``shape``: a contiguous view of the buffer made at load (grown if too small)."""
        size = int(np.prod(shape))
        if size > len(self._zeros):
            self._zeros = np.zeros(size, dtype=np.int64)
        view: npt.NDArray[np.int64] = self._zeros[:size].reshape(shape)
        return view

    def _encode_ids(self, ids: Sequence[TokenIds], batch_size: int) -> FloatArray:
        limit = self.max_seq_length
        ids = [truncate_ids(seq, limit) for seq in ids]
        out = np.empty((len(ids), self.dim), dtype=np.float32)
        for batch in length_sorted_batches([len(seq) for seq in ids], batch_size):
            out[batch] = self._run_batch([ids[i] for i in batch])
        return out
