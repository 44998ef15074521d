"""Pre-compute the evaluation harness's embedding cache for an ONNX model on another machine.

Used to fill ``evidentia eval retrieval``'s cache (``--cache-dir``) for the larger exploration models
when the 2 local cores are busy; it mirrors ``shared.embedding.onnx.OnnxEmbedder`` exactly (same
tokenizer, truncation, padding, pooling and L2 normalisation), and needs only numpy, tokenizers and
onnxruntime. The vectors are checked against the local embedder before use (see docs/benchmarks.md).

    python3 bench/offload_embed.py MODEL.onnx TOKENIZER.json cls|mean QUERY_PREFIX PASSAGE_PREFIX \
        texts.json OUT.npz
"""

from __future__ import annotations

import hashlib
import json
import os
import sys

import numpy as np


def key(kind: str, text: str) -> str:
    return hashlib.sha256(f"{kind}\x00{text}".encode()).hexdigest()[:32]


def main() -> None:
    import onnxruntime as ort
    from tokenizers import Tokenizer

    graph, tok_path, pooling, qprefix, pprefix, texts_path, out = sys.argv[1:8]
    tok = Tokenizer.from_file(tok_path)
    tok.no_padding()
    tok.enable_truncation(max_length=512)
    pad = tok.token_to_id("[PAD]") or 0
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = os.cpu_count() or 1
    opts.inter_op_num_threads = 1
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    sess = ort.InferenceSession(graph, sess_options=opts, providers=["CPUExecutionProvider"])
    inputs = {i.name for i in sess.get_inputs()}
    output = sess.get_outputs()[0].name
    with open(texts_path, encoding="utf-8") as fh:
        data = json.load(fh)

    def encode(texts: list[str]) -> np.ndarray:
        ids = [list(e.ids) for e in tok.encode_batch(texts, add_special_tokens=True)]
        vecs = np.empty((len(ids), 384), dtype=np.float32)
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
        for s in range(0, len(order), 32):
            batch = order[s : s + 32]
            width = max(len(ids[i]) for i in batch)
            input_ids = np.full((len(batch), width), pad, dtype=np.int64)
            mask = np.zeros((len(batch), width), dtype=np.int64)
            for r, i in enumerate(batch):
                input_ids[r, : len(ids[i])] = ids[i]
                mask[r, : len(ids[i])] = 1
            feeds = {"input_ids": input_ids, "attention_mask": mask}
            if "token_type_ids" in inputs:
                feeds["token_type_ids"] = np.zeros_like(input_ids)
            hidden = np.asarray(sess.run([output], feeds)[0], dtype=np.float32)
            if pooling == "cls":
                pooled = hidden[:, 0, :]
            else:
                m = mask[:, :, None].astype(np.float32)
                pooled = (hidden * m).sum(axis=1) / np.maximum(m.sum(axis=1), 1e-9)
            pooled /= np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)
            vecs[batch] = pooled
        return vecs

    p = encode([pprefix + t for t in data["passages"]])
    q = encode([qprefix + t for t in data["queries"]])
    keys = [key("passage", t) for t in data["passages"]] + [key("query", t) for t in data["queries"]]
    np.savez(out, keys=np.asarray(keys, dtype="S32"), vectors=np.concatenate([p, q]))
    print(out, len(keys))


if __name__ == "__main__":
    main()
