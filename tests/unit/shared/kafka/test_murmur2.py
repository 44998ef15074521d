"""The batch murmur2 partitioner gives each key the partition aiokafka's default partitioner gives it."""

from __future__ import annotations

import random

from aiokafka.partitioner import DefaultPartitioner, murmur2

from shared.kafka.murmur2 import murmur2_many, partition_slots


def _keys() -> list[bytes]:
    rng = random.Random(7)
    keys = [f"doc-{i}".encode() for i in range(300)]
    keys += [bytes(rng.randrange(256) for _ in range(rng.randrange(0, 41))) for _ in range(500)]
    return [*keys, b"", b"a", b"ab", b"abc", b"abcd", "é日本語".encode()]


def test_hashes_equal_aiokafka_murmur2_for_every_length() -> None:
    keys = _keys()
    assert murmur2_many(keys).tolist() == [murmur2(k) for k in keys]


def test_slots_equal_the_default_partitioner() -> None:
    keys = _keys()
    for partitions in (1, 3, 4, 7, 12):
        want = [DefaultPartitioner()(k, list(range(partitions)), []) for k in keys]
        assert partition_slots(keys, partitions) == want


def test_no_keys_no_slots() -> None:
    assert partition_slots([], 4) == []
