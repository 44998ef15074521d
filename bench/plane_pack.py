"""Pack a half-precision safetensors file small enough to travel to a GPU machine, and unpack it there.

A device call carries at most 64 MiB with the repository; bge-small's weights are 63 MiB in FP16 and xz leaves
56 MiB of them. Stored as two byte planes (the high bytes of the FP16 values: sign, exponent and two mantissa
bits, which compress to ~70 %; the low bytes, which hardly compress), they take ~54 MiB. Lossless: ``unpack``
writes the same bytes back (checked by the SHA-256 the pack records).

    python bench/plane_pack.py pack MODEL/model.safetensors OUT_DIR
    python bench/plane_pack.py unpack OUT_DIR MODEL/model.safetensors
"""

from __future__ import annotations

import hashlib
import json
import lzma
import sys
from pathlib import Path

import numpy as np


def pack(src: Path, out: Path) -> None:
    raw = src.read_bytes()
    head = 8 + int.from_bytes(raw[:8], "little")
    body = np.frombuffer(raw[head:], dtype=np.uint8)
    if body.size % 2:
        raise SystemExit("the tensors' bytes are not whole FP16 values")
    planes = body.reshape(-1, 2)
    out.mkdir(parents=True, exist_ok=True)
    (out / "head.bin").write_bytes(raw[:head])
    (out / "hi.xz").write_bytes(lzma.compress(planes[:, 1].tobytes(), preset=6))
    (out / "lo.xz").write_bytes(lzma.compress(planes[:, 0].tobytes(), preset=6))
    (out / "pack.json").write_text(json.dumps({"sha256": hashlib.sha256(raw).hexdigest(), "bytes": len(raw)}))


def unpack(src: Path, dst: Path) -> None:
    meta = json.loads((src / "pack.json").read_text())
    hi = np.frombuffer(lzma.decompress((src / "hi.xz").read_bytes()), dtype=np.uint8)
    lo = np.frombuffer(lzma.decompress((src / "lo.xz").read_bytes()), dtype=np.uint8)
    body = np.empty((hi.size, 2), dtype=np.uint8)
    body[:, 0], body[:, 1] = lo, hi
    raw = (src / "head.bin").read_bytes() + body.tobytes()
    if hashlib.sha256(raw).hexdigest() != meta["sha256"]:
        raise SystemExit("unpacked weights do not match the packed file's SHA-256")
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.write_bytes(raw)


if __name__ == "__main__":
    verb, a, b = sys.argv[1:4]
    (pack if verb == "pack" else unpack)(Path(a), Path(b))
