"""Kafka's default partitioner (murmur2 of the key, as the Java client and aiokafka compute it) for many keys
at once, with numpy.

aiokafka's ``murmur2`` is pure Python, about 7 us a key: a producer that sends tens of thousands of keyed
messages a second spends a large share of its time there (most keys of the pipeline topics are new: one
document's chunks share one). Here the keys of a batch are hashed together, column by column of their
4-byte words, with uint32 arithmetic that wraps as the Java ``int`` does; the result equals aiokafka's
for every key (tested against it).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

_SEED = 0x9747B28C
_M = np.uint32(0x5BD1E995)


def murmur2_many(keys: Sequence[bytes]) -> npt.NDArray[np.uint32]:
    """murmur2 of each key (what ``aiokafka.partitioner.murmur2`` returns), as uint32."""
    count = len(keys)
    if not count:
        return np.zeros(0, dtype=np.uint32)
    lengths = np.fromiter((len(k) for k in keys), dtype=np.int64, count=count)
    width = (int(lengths.max()) + 3) // 4 * 4 or 4
    buf = np.zeros((count, width), dtype=np.uint8)
    flat = np.frombuffer(b"".join(keys), dtype=np.uint8)
    rows = np.repeat(np.arange(count), lengths)
    starts = np.cumsum(lengths) - lengths
    cols = np.arange(len(flat)) - np.repeat(starts, lengths)
    buf[rows, cols] = flat
    words = buf.view("<u4").astype(np.uint32)  # (count, width // 4)
    full = lengths // 4
    with np.errstate(over="ignore"):
        h = (np.uint32(_SEED) ^ lengths.astype(np.uint32)).astype(np.uint32)
        for j in range(words.shape[1]):
            live = full > j
            if not live.any():
                break
            k = words[:, j] * _M
            k ^= k >> np.uint32(24)
            k *= _M
            h = np.where(live, (h * _M) ^ k, h)
        extra = lengths % 4
        tail = full * 4
        index = np.arange(count)
        last = buf[index, np.minimum(tail, width - 1)].astype(np.uint32)
        second = buf[index, np.minimum(tail + 1, width - 1)].astype(np.uint32)
        third = buf[index, np.minimum(tail + 2, width - 1)].astype(np.uint32)
        h = np.where(extra >= 3, h ^ (third << np.uint32(16)), h)
        h = np.where(extra >= 2, h ^ (second << np.uint32(8)), h)
        h = np.where(extra >= 1, (h ^ last) * _M, h)
        h ^= h >> np.uint32(13)
        h *= _M
        h ^= h >> np.uint32(15)
    return h.astype(np.uint32)


def partition_slots(keys: Sequence[bytes], partitions: int) -> list[int]:
    """Index among ``partitions`` sorted partition ids that the default partitioner gives each key
    (``(murmur2(key) & 0x7fffffff) % partitions``, as ``aiokafka.partitioner.DefaultPartitioner``)."""
    hashes = murmur2_many(keys) & np.uint32(0x7FFFFFFF)
    return (hashes % np.uint32(partitions)).tolist()  # type: ignore[no-any-return]
