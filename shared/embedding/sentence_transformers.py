"""Torch backend: a sentence-transformers model (local folder, the packaged MiniLM, or a hub name).

Two paths give the same vectors (within fp16 tolerance on a GPU):

* :meth:`encode_passages` on the CPU is plain ``SentenceTransformer.encode`` (it already sorts by
  length); on CUDA it tokenises in a background thread while the GPU works and feeds the fast path.
* :meth:`encode_pretokenized` (the fast path) takes model input ids, sorts them by length, pads each
  batch to its own longest row in pinned host memory, copies batch ``k+1`` to the GPU on a side
  stream while batch ``k`` is computed, keeps the results on the device and synchronises once at
  the end. On a GPU plain ``encode`` is starved by tokenisation and per-batch Python work; this path
  is not.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from shared.embedding.base import (
    BaseEmbedder,
    EmbedderError,
    FloatArray,
    TokenIds,
    length_sorted_batches,
    pad_ids,
    truncate_ids,
)

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)

# Texts tokenised at once by the background tokeniser of the CUDA path.
_TOKENISE_CHUNK = 1024


def _hub_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in {"1", "true", "yes", "on"}


class SentenceTransformerEmbedder(BaseEmbedder):
    """An embedder backed by ``sentence_transformers.SentenceTransformer`` (torch)."""

    _model: Any
    _tokenizer: Any
    _fast_tokenizer: Any

    def _check_device(self) -> None:
        """Refuse a GPU that this PyTorch cannot use (its CPU build, no driver, no such GPU) with the reason."""
        if not self.device.startswith("cuda"):
            return
        import torch

        from shared.embedding.providers import DeviceUnavailable, device_index

        if not torch.cuda.is_available():
            reason = f"this PyTorch ({torch.__version__}) sees no GPU" + (
                " (it is the CPU build)" if torch.version.cuda is None else " (no NVIDIA driver or device)"
            )
        elif device_index(self.device) >= torch.cuda.device_count():
            reason = f"this machine has {torch.cuda.device_count()} GPU(s), not {self.device}"
        else:
            return
        raise DeviceUnavailable(
            f"EVIDENTIA_EMBEDDING_DEVICE={self.device} asks for a GPU, but {reason}. Not running {self.name} on "
            "the CPU instead: install a CUDA build of torch (docs/install.md), or set EVIDENTIA_EMBEDDING_DEVICE=cpu."
        )

    def _load(self) -> None:
        from sentence_transformers import SentenceTransformer

        self._check_device()
        source = self.config.source
        local = Path(source).expanduser()
        try:
            if local.is_dir():
                model = SentenceTransformer(str(local), device=self.device, local_files_only=True)
            else:
                model = self._load_from_hub(SentenceTransformer, source)
        except EmbedderError:
            raise
        except Exception as exc:  # the library raises many kinds (OSError, ValueError, HTTP errors)
            raise EmbedderError(
                f"Could not load the embedding model {source!r} with sentence-transformers: {exc}"
            ) from exc
        self.provider = "torch"
        if self.config.fp16 and self.device.startswith("cuda"):
            model.half()
            self.precision = "fp16"
        model.eval()
        self._model = model
        self._tokenizer = model.tokenizer
        get_dim = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
        dim = get_dim()
        if dim is None:
            raise EmbedderError(f"The model {source!r} does not say its embedding dimension.")
        if self._dim is not None and self._dim != dim:
            raise EmbedderError(f"The model {source!r} makes {dim}-d vectors, not the expected {self._dim}.")
        self._dim = int(dim)
        self._max_seq_length = int(model.max_seq_length or 512)
        self._pad_id = int(self._tokenizer.pad_token_id or 0)
        self._token_types = "token_type_ids" in getattr(self._tokenizer, "model_input_names", ())
        self._fast_tokenizer = self._make_fast_tokenizer()
        log.info(
            "embedding model %s loaded from %s on %s (fp16=%s)",
            self.name,
            source,
            self.device,
            self.config.fp16 and self.device.startswith("cuda"),
        )

    def _make_fast_tokenizer(self) -> Any:
        """A private copy of the model's Rust tokeniser, truncating to ``max_seq_length`` (None if none)."""
        backend = getattr(self._tokenizer, "backend_tokenizer", None)
        if backend is None:
            return None
        from tokenizers import Tokenizer

        tok = Tokenizer.from_str(backend.to_str())
        tok.no_padding()
        tok.enable_truncation(max_length=self.max_seq_length)
        return tok

    def _load_from_hub(self, cls: Any, source: str) -> Any:
        try:
            return cls(source, device=self.device, local_files_only=True)
        except Exception as local_exc:
            if _hub_offline():
                raise EmbedderError(
                    f"The embedding model {source!r} is neither a local folder nor in the Hugging Face "
                    "cache, "
                    "and the hub is off (HF_HUB_OFFLINE is set). Set EVIDENTIA_EMBEDDING_MODEL to a local "
                    "sentence-transformers folder or a model `evidentia models list` shows as available "
                    "(e.g. `evidentia models fetch bge-small-en-v1.5`)."
                ) from local_exc
        try:
            return cls(source, device=self.device)
        except Exception as exc:
            raise EmbedderError(
                f"The embedding model {source!r} could not be loaded from the Hugging Face hub "
                f"({type(exc).__name__}: "
                f"{exc}). Where the hub is unreachable, set EVIDENTIA_EMBEDDING_MODEL to a local folder "
                "or a model "
                "that `evidentia models list` shows as available "
                "(e.g. `evidentia models fetch bge-small-en-v1.5`)."
            ) from exc

    @property
    def model(self) -> Any:
        """The loaded ``SentenceTransformer`` (for benchmarks: raw ``encode``)."""
        self.warm_up()
        return self._model

    def _encode(self, texts: list[str], batch_size: int) -> FloatArray:
        if self.device.startswith("cuda"):
            return self._encode_cuda(texts, batch_size)
        out = self._model.encode(
            texts,
            batch_size=batch_size,
            convert_to_numpy=True,
            normalize_embeddings=True,
            show_progress_bar=False,
        )
        return np.ascontiguousarray(out, dtype=np.float32)

    def _encode_cuda(self, texts: list[str], batch_size: int) -> FloatArray:
        """Tokenise chunk ``k+1`` on a thread (Rust releases the GIL) while the GPU embeds chunk ``k``."""
        chunks = [texts[i : i + _TOKENISE_CHUNK] for i in range(0, len(texts), _TOKENISE_CHUNK)]
        parts: list[FloatArray] = []
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="tokenise") as pool:
            pending: Future[list[list[int]]] = pool.submit(self._token_ids, chunks[0])
            for k in range(len(chunks)):
                ids = pending.result()
                if k + 1 < len(chunks):
                    pending = pool.submit(self._token_ids, chunks[k + 1])
                parts.append(self._encode_ids(ids, batch_size))
        return np.concatenate(parts, axis=0)

    def _token_ids(self, texts: list[str]) -> list[list[int]]:
        if self._fast_tokenizer is not None:  # the Rust tokeniser straight: ~1.5x the transformers call
            return [enc.ids for enc in self._fast_tokenizer.encode_batch(texts, add_special_tokens=True)]
        enc = self._tokenizer(
            texts,
            add_special_tokens=True,
            truncation=True,
            max_length=self.max_seq_length,
            return_attention_mask=False,
            return_token_type_ids=False,
        )
        return [list(x) for x in enc["input_ids"]]

    def _count_tokens(self, text: str) -> int:
        enc = self._tokenizer(text, add_special_tokens=False, truncation=False, verbose=False)
        return len(enc["input_ids"])

    def _host_batches(
        self, ids: Sequence[TokenIds], batches: list[list[int]], pin: bool
    ) -> Iterator[dict[str, torch.Tensor]]:
        import torch

        for batch in batches:
            input_ids, mask = pad_ids([ids[i] for i in batch], self._pad_id)
            feats = {"input_ids": torch.from_numpy(input_ids), "attention_mask": torch.from_numpy(mask)}
            if self._token_types:
                feats["token_type_ids"] = torch.zeros_like(feats["input_ids"])
            if pin:
                feats = {k: v.pin_memory() for k, v in feats.items()}
            yield feats

    def _forward(self, feats: dict[str, torch.Tensor]) -> torch.Tensor:
        emb: torch.Tensor = self._model.forward(dict(feats))["sentence_embedding"]
        return emb

    def _encode_ids(self, ids: Sequence[TokenIds], batch_size: int) -> FloatArray:
        import torch

        limit = self.max_seq_length
        ids = [truncate_ids(seq, limit) for seq in ids]
        batches = length_sorted_batches([len(seq) for seq in ids], batch_size)
        order = [i for batch in batches for i in batch]
        cuda = self.device.startswith("cuda")
        outs: list[torch.Tensor] = []
        with torch.inference_mode():
            if not cuda:
                for feats in self._host_batches(ids, batches, pin=False):
                    outs.append(self._forward(feats).float())
            else:
                device = torch.device(self.device)
                compute = torch.cuda.current_stream(device)
                copy = torch.cuda.Stream(device)  # type: ignore[no-untyped-call]

                def upload(host: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], torch.cuda.Event]:
                    with torch.cuda.stream(copy):
                        dev = {k: v.to(device, non_blocking=True) for k, v in host.items()}
                        done = torch.cuda.Event()  # type: ignore[no-untyped-call]
                        done.record(copy)
                    return dev, done

                # Lazy: batch k+1 is padded, pinned and sent while the GPU runs batch k.
                host_iter = self._host_batches(ids, batches, pin=True)
                first = next(host_iter)
                pending: tuple[dict[str, torch.Tensor], torch.cuda.Event] | None = upload(first)
                while pending is not None:
                    dev, done = pending
                    nxt = next(host_iter, None)
                    pending = upload(nxt) if nxt is not None else None
                    compute.wait_event(done)
                    for t in dev.values():
                        t.record_stream(compute)
                    outs.append(self._forward(dev).float())
            stacked = torch.cat(outs, dim=0)
            stacked = torch.nn.functional.normalize(stacked, p=2.0, dim=1)
            result = torch.empty_like(stacked)
            result[torch.tensor(order, device=stacked.device)] = stacked
            arr = result.cpu().numpy()
        return np.ascontiguousarray(arr, dtype=np.float32)
