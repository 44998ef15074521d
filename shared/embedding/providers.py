"""Where an ONNX model runs: the execution providers asked of ONNX Runtime, and what it really gave.

ONNX Runtime does not fail when the CUDA provider cannot run: the CPU build of ``onnxruntime`` has none,
and the GPU build (``onnxruntime-gpu``) that cannot load its CUDA or cuDNN libraries, or finds no driver
or no GPU, logs an error and falls back to the CPU. A pod that asked for a GPU would then embed at a
hundredth of the speed while looking healthy. So the session's *active* providers are read back after it
is made, and :func:`settle_device` refuses an explicit ``cuda`` device that did not get the CUDA provider
(``auto`` falls back to the CPU with a warning instead).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from shared.embedding.base import EmbedderError

log = logging.getLogger(__name__)

CUDA_PROVIDER = "CUDAExecutionProvider"
CPU_PROVIDER = "CPUExecutionProvider"
GPU_INSTALL_HINT = (
    "the GPU build is the `embedder-gpu` extra, pinned in requirements/embedder-gpu.lock (the image: "
    "`docker build --build-arg SERVICE=embedder --build-arg LOCK=embedder-gpu .`)"
)


class DeviceUnavailable(EmbedderError):
    """A GPU was asked for (``EVIDENTIA_EMBEDDING_DEVICE=cuda``) but the model would run on the CPU."""


def wants_cuda(device: str) -> bool:
    """``cuda`` or ``cuda:N``."""
    return device == "cuda" or device.startswith("cuda:")


def device_index(device: str) -> int:
    """The GPU ordinal of ``cuda:N`` (0 for ``cuda``)."""
    _, _, index = device.partition(":")
    return int(index) if index else 0


def auto_device(available: Sequence[str]) -> str:
    """What ``auto`` tries first: ``cuda`` when this onnxruntime has a CUDA provider, else ``cpu``."""
    return "cuda" if CUDA_PROVIDER in available else "cpu"


def requested_providers(device: str) -> list[str | tuple[str, dict[str, Any]]]:
    """The providers to ask for ``device``, best first (the CPU provider stays as ONNX Runtime's fallback)."""
    if not wants_cuda(device):
        return [CPU_PROVIDER]
    return [(CUDA_PROVIDER, {"device_id": device_index(device)}), CPU_PROVIDER]


def load_cuda_libraries(ort: Any) -> None:
    """Load CUDA and cuDNN from the ``nvidia-*`` wheels before the first CUDA session.

    ``onnxruntime.preload_dlls`` (1.21+) finds them in site-packages, so no system CUDA is needed, only the
    NVIDIA driver; it does nothing in the CPU build. A failure here is only logged: the session's active
    providers (:func:`settle_device`) are what decide.
    """
    preload = getattr(ort, "preload_dlls", None)
    if preload is None:
        return
    try:
        preload()
    except Exception:  # a missing library shows again when the session falls back; say it once here
        log.warning("onnxruntime could not preload the CUDA libraries", exc_info=True)


def settle_device(device: str, *, required: bool, active: Sequence[str], available: Sequence[str], model: str) -> str:
    """The device a session with ``active`` providers really runs on.

    ``device`` itself when it is the CPU or the CUDA provider is active. Otherwise the session fell back
    to the CPU: :class:`DeviceUnavailable` when the device was asked for (``required``), else ``cpu`` with
    a warning.
    """
    if not wants_cuda(device) or (active and active[0] == CUDA_PROVIDER):
        return device
    if CUDA_PROVIDER not in available:
        reason = f"this onnxruntime has no CUDA provider (its CPU build is installed; {GPU_INSTALL_HINT})"
    else:
        reason = (
            "onnxruntime's CUDA provider did not load (the CUDA or cuDNN libraries, the NVIDIA driver or a "
            f"visible GPU {device_index(device)} is missing; onnxruntime's error is logged above)"
        )
    if required:
        raise DeviceUnavailable(
            f"EVIDENTIA_EMBEDDING_DEVICE={device} asks for a GPU, but {reason}. Not running {model} on the CPU "
            "instead: install the GPU build, or set EVIDENTIA_EMBEDDING_DEVICE=cpu (or auto) to use the CPU."
        )
    log.warning("embedding device auto: %s; %s runs on the CPU", reason, model)
    return "cpu"
