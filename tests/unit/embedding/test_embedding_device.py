"""Where the ONNX model runs: the device chosen, reported (/health, the metric, the log) and refused when a GPU
was asked for but ONNX Runtime's CUDA provider does not load; I/O binding and length-grouped batches.

These run on CPU machines. A GPU build of onnxruntime that cannot load its CUDA libraries lists the CUDA
provider yet falls back to the CPU; the CPU build of onnxruntime does the same (with a warning) when it is asked
for a provider it lacks, so listing CUDA as available reproduces that case here.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import onnxruntime
import pytest
from faststream.kafka import KafkaBroker

from shared import metrics
from shared.embedding import clear_cache, get_embedder, resolve
from shared.embedding.base import BaseEmbedder, runtime_of
from shared.embedding.onnx import OnnxEmbedder
from shared.embedding.providers import (
    CPU_PROVIDER,
    CUDA_PROVIDER,
    DeviceUnavailable,
    auto_device,
    requested_providers,
    settle_device,
)
from shared.service import make_app
from shared.settings import EmbeddingSettings

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(autouse=True)
def _fresh_embedders() -> Any:
    clear_cache()
    yield
    clear_cache()


def _bge(folder: Path, device: str, **kw: Any) -> BaseEmbedder:
    embedder = get_embedder(
        EmbeddingSettings(model="bge-small-en-v1.5", device=device, models_dir=str(folder.parent), **kw)
    )
    assert isinstance(embedder, BaseEmbedder)
    return embedder


def _cuda_listed(monkeypatch: pytest.MonkeyPatch) -> None:
    """This onnxruntime claims a CUDA provider, as the GPU build does, but cannot give it (no GPU here)."""
    monkeypatch.setattr(onnxruntime, "get_available_providers", lambda: [CUDA_PROVIDER, CPU_PROVIDER])


# --- the choice, without a model --------------------------------------------------------------------------------


def test_providers_asked_for_each_device() -> None:
    assert requested_providers("cpu") == [CPU_PROVIDER]
    assert requested_providers("cuda") == [(CUDA_PROVIDER, {"device_id": 0}), CPU_PROVIDER]
    assert requested_providers("cuda:1") == [(CUDA_PROVIDER, {"device_id": 1}), CPU_PROVIDER]
    assert auto_device([CPU_PROVIDER]) == "cpu"
    assert auto_device([CUDA_PROVIDER, CPU_PROVIDER]) == "cuda"


def test_settled_device_is_the_one_the_session_got(caplog: pytest.LogCaptureFixture) -> None:
    both = [CUDA_PROVIDER, CPU_PROVIDER]
    assert settle_device("cpu", required=True, active=[CPU_PROVIDER], available=[CPU_PROVIDER], model="m") == "cpu"
    assert settle_device("cuda:1", required=True, active=both, available=both, model="m") == "cuda:1"
    with caplog.at_level(logging.WARNING, logger="shared.embedding.providers"):
        assert settle_device("cuda", required=False, active=[CPU_PROVIDER], available=both, model="m") == "cpu"
    assert "runs on the CPU" in caplog.text


def test_an_asked_for_gpu_that_is_missing_is_refused_with_the_reason() -> None:
    with pytest.raises(DeviceUnavailable) as no_build:
        settle_device("cuda", required=True, active=[CPU_PROVIDER], available=[CPU_PROVIDER], model="m")
    assert "EVIDENTIA_EMBEDDING_DEVICE=cuda asks for a GPU" in str(no_build.value)
    assert "CPU build" in str(no_build.value) and "embedder-gpu" in str(no_build.value)
    both = [CUDA_PROVIDER, CPU_PROVIDER]
    with pytest.raises(DeviceUnavailable) as no_load:
        settle_device("cuda:2", required=True, active=[CPU_PROVIDER], available=both, model="m")
    assert "did not load" in str(no_load.value) and "GPU 2" in str(no_load.value)


def test_onnx_models_settle_auto_at_load_and_remember_an_explicit_device(tmp_path: Path) -> None:
    folder = tmp_path / "bge-small-en-v1.5"
    (folder / "onnx").mkdir(parents=True)
    (folder / "onnx" / "model.onnx").write_bytes(b"")
    (folder / "modules.json").write_text("[]")
    for device, required in (("auto", False), ("cuda", True), ("cpu", True)):
        backend, config = resolve(EmbeddingSettings(model="bge-small-en-v1.5", device=device, models_dir=str(tmp_path)))
        assert backend is OnnxEmbedder
        assert (config.device, config.device_required, config.fp16) == (device, required, None)
    _, torch_config = resolve(EmbeddingSettings(model="all-MiniLM-L6-v2", device="auto"))
    assert torch_config.device in ("cpu", "cuda") and torch_config.fp16 is (torch_config.device == "cuda")


# --- the choice with the real model and the installed onnxruntime ---------------------------------------------


def test_cpu_is_reported_everywhere(bge_folder: Path) -> None:
    embedder = _bge(bge_folder, "cpu")
    embedder.warm_up()
    info = runtime_of(embedder)
    assert info == {"model": "BAAI/bge-small-en-v1.5", "device": "cpu", "provider": CPU_PROVIDER, "precision": "fp32"}
    assert metrics.registry.get_sample_value("evidentia_embedding_device_info", info) == 1.0


def test_cuda_without_a_cuda_provider_is_refused(bge_folder: Path) -> None:
    assert CUDA_PROVIDER not in onnxruntime.get_available_providers(), "this test is for CPU machines"
    with pytest.raises(DeviceUnavailable, match="its CPU build is installed"):
        _bge(bge_folder, "cuda").warm_up()


def test_cuda_provider_that_does_not_load_is_refused_or_left_for_auto(
    bge_folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _cuda_listed(monkeypatch)
    with pytest.raises(DeviceUnavailable, match="CUDA provider did not load"):
        _bge(bge_folder, "cuda").warm_up()
    clear_cache()
    auto = _bge(bge_folder, "auto")
    auto.warm_up()  # tried CUDA (listed), got the CPU: runs there, and says so
    assert (auto.device, auto.provider) == ("cpu", CPU_PROVIDER)
    assert auto.encode_queries(["aspirin"]).shape == (1, 384)


def test_io_binding_gives_the_plain_runs_vectors_in_length_grouped_batches(
    bge_folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    embedder = _bge(bge_folder, "cpu", batch_size=2)
    embedder.warm_up()
    assert isinstance(embedder, OnnxEmbedder)
    texts = ["short", "a much longer passage about aspirin and the heart " * 6, "tiny", "another long one " * 12]
    batches: list[list[int]] = []
    run_on = embedder._run_on

    def recording(session: Any, batch: Any, io_device: str, device_id: int) -> Any:
        batches.append(sorted(len(seq) for seq in batch))
        return run_on(session, batch, io_device, device_id)

    monkeypatch.setattr(embedder, "_run_on", recording)
    vectors = embedder.encode_passages(texts)
    # Grouped by length, not taken in order: the two long texts share a batch and the two short ones the other.
    lengths = sorted(len(ids) for ids in embedder.token_ids(texts))
    assert sorted(batches) == [lengths[:2], lengths[2:]]
    session = embedder._session
    for text, vector in zip(texts, vectors, strict=True):
        ids = np.asarray([embedder.token_ids([text])[0]], dtype=np.int64)
        feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)}
        cls = session.run(None, feeds)[0][0, 0]
        np.testing.assert_allclose(vector, cls / np.linalg.norm(cls), atol=1e-5)
    a, b = embedder._token_types((2, 7)), embedder._token_types((3, 5))
    assert np.shares_memory(a, b) and a.flags.c_contiguous and not a.any()


# --- the service: /health, the refusal at start -----------------------------------------------------------------


async def test_health_reports_the_services_details() -> None:
    details = {"model": "BAAI/bge-small-en-v1.5", "device": "cuda:0", "provider": CUDA_PROVIDER, "precision": "fp16"}
    app = make_app("embedder", KafkaBroker("127.0.0.1:1"), details=lambda: details)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://embedder") as http:
        response = await http.get("/health")
    assert response.status_code == 200
    assert response.json() == {"service": "embedder", "status": "ok", **details}


def test_embedder_service_refuses_to_start_on_a_missing_gpu(bge_folder: Path) -> None:
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "EVIDENTIA_EMBEDDING_MODEL": "bge-small-en-v1.5",
        "EVIDENTIA_EMBEDDING_MODELS_DIR": str(bge_folder.parent),
        "EVIDENTIA_EMBEDDING_DEVICE": "cuda",
        "EVIDENTIA_KAFKA_BOOTSTRAP": "127.0.0.1:1",  # never reached: the model loads first
    }
    done = subprocess.run(
        [sys.executable, "-m", "services.embedder"], env=env, cwd=REPO, capture_output=True, text=True, timeout=240
    )
    assert done.returncode != 0
    assert "the embedder cannot start: EVIDENTIA_EMBEDDING_DEVICE=cuda asks for a GPU" in done.stderr + done.stdout
