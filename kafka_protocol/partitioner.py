"""Kafka's default partitioner: murmur2 of the key for keyed records, round robin per topic
otherwise.

Pure (no I/O).  A keyed record lands where the Java client's default partitioner puts it
(``Utils.murmur2`` of the key, as a positive int, modulo the partition count).  Java's newer
"sticky" behaviour for unkeyed records (fill a batch on one partition, then move on) is not
reproduced: unkeyed records simply rotate over the partitions of their topic.
"""

from __future__ import annotations

import struct


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2``: MurmurHash2 with seed 0x9747b28c, as a signed 32-bit int."""
    m, mask = 0x5BD1E995, 0xFFFFFFFF
    length = len(data)
    h = (0x9747B28C ^ length) & mask
    whole = length - length % 4
    for (k,) in struct.iter_unpack("<I", data[:whole]):
        k = (k * m) & mask
        k ^= k >> 24
        k = (k * m) & mask
        h = ((h * m) & mask) ^ k
    tail = data[whole:]
    if len(tail) == 3:
        h ^= tail[2] << 16
    if len(tail) >= 2:
        h ^= tail[1] << 8
    if tail:
        h ^= tail[0]
        h = (h * m) & mask
    h ^= h >> 13
    h = (h * m) & mask
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for_key(key: bytes, partitions: int) -> int:
    """The Java client's default partitioner for a keyed record."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions


class DefaultPartitioner:
    """Keyed records by murmur2 of the key; unkeyed ones round robin, per topic."""

    def __init__(self) -> None:
        self._next: dict[str, int] = {}

    def partition(self, topic: str, key: bytes | None, partitions: int) -> int:
        assert partitions > 0
        if key is not None:
            return partition_for_key(key, partitions)
        n = self._next.get(topic, 0)
        self._next[topic] = n + 1
        return n % partitions
