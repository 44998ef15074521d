#!/usr/bin/env bash
# The default model (bge-small-en-v1.5) on a GPU machine with no network, under 5 minutes: where it runs, its
# vectors against the CPU's, the model stage's rate, and the embedder's own batching path (decode, batch, encode,
# serialise; no Kafka) in 1-3 processes sharing the GPU.
#
# The GPU runtime is PyTorch with CUDA, loading the ONNX export's own weights (shared/embedding/onnx_to_torch.py):
# ONNX Runtime's CUDA build and its CUDA 12 libraries are ~1 GB of wheels, more than a device call carries, and
# the GPU machine's image has PyTorch for CUDA 13 but the CPU build of onnxruntime.
#
#   1. Here (the venv, with the `onnx` package importable):   bench/gpu_bge_check.sh --prepare
#      writes .gpu34/ (ignored by git): the FP16 torch folder with its weights packed by bench/plane_pack.py
#      (~54 MiB), the SciFact corpus, the CPU ONNX vectors of its first passages, pydantic's wheels unpacked.
#      The whole call must stay under 64 MiB: run it with tests/, data/, docs/ and deploy/ kept out of the
#      travelling tree (they are not needed there).
#   2. There:   bash bench/gpu_bge_check.sh   (carry .gpu34)
#
# Environment: PYTHON (default python3), GPU_CHECK_PROCS (default "1 2 3"), GPU_CHECK_COPIES (default 8),
# GPU_CHECK_CONSUME (default "1024 4096").
set -euo pipefail
cd "$(dirname "$0")/.."
BUNDLE=.gpu34
FOLDER=$BUNDLE/bge-small-en-v1.5-torch

if [[ "${1:-}" == "--prepare" ]]; then
  PY=${PYTHON:-.venv/bin/python}
  mkdir -p "$BUNDLE"
  tmp=$(mktemp -d)
  PYTHONPATH=$PWD "$PY" -m shared.embedding.onnx_to_torch models/bge-small-en-v1.5 --out "$tmp/torch" --fp16
  rm -rf "$FOLDER" && mkdir -p "$FOLDER" && cp -r "$tmp/torch/." "$FOLDER/" && rm "$FOLDER/model.safetensors"
  "$PY" bench/plane_pack.py pack "$tmp/torch/model.safetensors" "$BUNDLE/weights"
  cp ../shared/data/beir_scifact/corpus.jsonl.gz "$BUNDLE/corpus.jsonl.gz"
  PYTHONPATH=$PWD "$PY" - "$BUNDLE" <<'PYEOF'
import sys
from pathlib import Path

import numpy as np

sys.path[:0] = ["bench"]
from embed_throughput import load_texts
from shared.embedding.base import EmbedderConfig
from shared.embedding.onnx import OnnxEmbedder, read_pooling

bundle, folder = Path(sys.argv[1]), Path("models/bge-small-en-v1.5")
texts = load_texts(bundle / "corpus.jsonl.gz", 160)
config = EmbedderConfig(name="BAAI/bge-small-en-v1.5", source=str(folder), device="cpu", fp16=False, pooling=read_pooling(folder))
vectors = OnnxEmbedder(config).encode_passages(texts)
np.savez_compressed(bundle / "ref.npz", vectors=vectors.astype(np.float32), n=len(texts))
PYEOF
  "$PY" -m pip download -q -d "$tmp/wheels" --only-binary=:all: --python-version 3.12 --platform manylinux2014_x86_64 \
    --platform manylinux_2_17_x86_64 pydantic==2.14.4 pydantic-core==2.50.5 pydantic-settings==2.16.3 python-dotenv \
    annotated-types typing-inspection typing-extensions
  for w in "$tmp"/wheels/*.whl; do "$PY" -c "import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])" "$w" "$tmp/pylib"; done
  tar -C "$tmp" -cJf "$BUNDLE/pylib.tar.xz" pylib
  rm -rf "$tmp"
  du -sh "$BUNDLE"
  exit 0
fi

PY=${PYTHON:-python3}
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=true
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || echo "nvidia-smi failed"
echo "CPUs: $(nproc)"
EXTRAS=${TMPDIR:-/tmp}/evidentia_gpu34
mkdir -p "$EXTRAS" && tar -C "$EXTRAS" -xJf "$BUNDLE/pylib.tar.xz"
export PYTHONPATH="$PWD:$EXTRAS/pylib${PYTHONPATH:+:$PYTHONPATH}"
"$PY" -c "import torch, transformers, sentence_transformers as st; print('torch', torch.__version__, 'transformers', transformers.__version__, 'sentence-transformers', st.__version__)"
[[ -f "$FOLDER/model.safetensors" ]] || "$PY" bench/plane_pack.py unpack "$BUNDLE/weights" "$FOLDER/model.safetensors"

if [[ "${GPU_CHECK_SWEEP:-0}" == "1" ]]; then
  # Where one process loses the model stage's rate: the interpreter's switch interval (how long the thread
  # driving the GPU waits for the GIL after handing it over) and who decodes and serialises (the event loop and
  # a serialiser thread, as the service does, or the model's thread alone), at two model batch sizes.
  echo "== one process: switch interval x decode placement x model batch (consume 4096)"
  for cap in 0 256; do
    GPU_CHECK_MAX_TOKENS=$cap GPU_CHECK_PROCS=1 GPU_CHECK_SWITCH_MS="5 0.5" GPU_CHECK_DECODE="loop single" \
      GPU_CHECK_CONSUME=4096 GPU_CHECK_MODEL_BATCHES="512 128" GPU_CHECK_COPIES="${GPU_CHECK_COPIES:-6}" \
      "$PY" bench/gpu_service_path.py "$FOLDER" "$BUNDLE/corpus.jsonl.gz" || echo "sweep (cap $cap) failed: $?"
  done
  exit 0
fi

echo "== the default model on the GPU: runtime, vectors against the CPU, the model stage"
"$PY" bench/gpu_bge.py "$FOLDER" "$BUNDLE/corpus.jsonl.gz" "$BUNDLE/ref.npz" || echo "gpu_bge.py failed: $?"

echo "== the embedder's batching path, no Kafka (binary ChunkCreated v2 -> decode -> encode -> ChunkEmbedded v2)"
GPU_CHECK_PROCS="${GPU_CHECK_PROCS:-1 2 3}" GPU_CHECK_CONSUME="${GPU_CHECK_CONSUME:-1024 4096}" \
  GPU_CHECK_COPIES="${GPU_CHECK_COPIES:-8}" "$PY" bench/gpu_service_path.py "$FOLDER" "$BUNDLE/corpus.jsonl.gz" \
  || echo "service path failed: $?"
echo "== the same, chunks capped at 256 tokens"
GPU_CHECK_MAX_TOKENS=256 GPU_CHECK_PROCS="1 2" GPU_CHECK_CONSUME=1024 GPU_CHECK_COPIES="${GPU_CHECK_COPIES:-8}" \
  "$PY" bench/gpu_service_path.py "$FOLDER" "$BUNDLE/corpus.jsonl.gz" || echo "service path (256) failed: $?"
