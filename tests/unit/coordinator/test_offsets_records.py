"""``__consumer_offsets`` records and the offset store replayed from them."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from broker.coordinator.offsets import CommittedOffset, ExpiryCondition, OffsetStore
from broker.coordinator.records import (
    ConsumerGroupRecord,
    GroupRecord,
    OffsetRecord,
    decode,
    encode_group,
    encode_offset,
    java_string_hash,
    partition_for,
)
from kafka_protocol.coordinator import GroupMetadataValue, OffsetCommitValue

names = st.text(min_size=1, max_size=30)


def test_java_string_hash_matches_java() -> None:
    # values of String.hashCode() computed by jshell (OpenJDK 17)
    assert java_string_hash("") == 0
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("my-consumer-group") == 1513705513
    assert java_string_hash("\U0001f600") == 1772899  # a surrogate pair: two UTF-16 units


def test_partition_for_maps_min_int_to_zero() -> None:
    # "polygenelubricants".hashCode() == Integer.MIN_VALUE; Kafka's Utils.abs gives 0
    assert java_string_hash("polygenelubricants") == -(2**31)
    assert partition_for("polygenelubricants", 50) == 0
    assert all(0 <= partition_for(str(i), 7) < 7 for i in range(200))


@given(names, names, st.integers(0, 2**31 - 1), st.integers(-1, 2**62), st.text(max_size=50))
def test_offset_records_round_trip(
    group: str, topic: str, partition: int, offset: int, metadata: str
) -> None:
    value = OffsetCommitValue(offset=offset, metadata=metadata, commit_timestamp=5)
    key, encoded = encode_offset(group, topic, partition, value)
    assert decode(key, encoded) == OffsetRecord(group, topic, partition, value)
    tomb_key, tomb = encode_offset(group, topic, partition, None)
    assert tomb is None and decode(tomb_key, None) == OffsetRecord(group, topic, partition, None)


def test_group_records_round_trip_and_unknown_keys_are_skipped() -> None:
    value = GroupMetadataValue(protocol_type="consumer", generation=3, protocol="range")
    key, encoded = encode_group("g", value)
    assert decode(key, encoded) == GroupRecord("g", value)
    consumer = decode(b"\x00\x05whatever", b"")  # a KIP-848 record: handed over still encoded
    assert isinstance(consumer, ConsumerGroupRecord) and consumer.key_version == 5
    assert decode(b"\x00\x09whatever", b"") is None  # a share-group record: not ours


def test_a_value_of_an_unknown_version_is_refused() -> None:
    key, _ = encode_offset("g", "t", 0, None)
    try:
        decode(key, b"\x00\x63rest")
    except ValueError as exc:
        assert "version 99" in str(exc)
    else:
        raise AssertionError("decoded a value of version 99")


def _commit(store: OffsetStore, group: str, topic: str, offset: int, at: int) -> None:
    value = OffsetCommitValue(offset=offset, metadata="", commit_timestamp=at)
    store.apply(OffsetRecord(group, topic, 0, value))


def test_the_store_is_the_replay_of_the_records() -> None:
    store = OffsetStore()
    _commit(store, "g", "a", 5, at=100)
    _commit(store, "g", "a", 9, at=200)
    _commit(store, "g", "b", 1, at=300)
    assert store.get("g", ("a", 0)) == CommittedOffset(9, -1, "", 200)
    store.apply(OffsetRecord("g", "a", 0, None))
    assert store.get("g", ("a", 0)) is None and store.has_offsets("g")
    store.apply(OffsetRecord("g", "b", 0, None))
    assert not store.has_offsets("g"), "a group with no offset left is forgotten"


def test_offsets_expire_by_their_groups_condition() -> None:
    store = OffsetStore()
    _commit(store, "busy", "t", 1, at=0)
    _commit(store, "idle", "t", 1, at=0)
    _commit(store, "idle", "u", 1, at=900)
    _commit(store, "simple", "t", 1, at=0)
    _commit(store, "simple", "u", 1, at=600)
    rules = {"idle": ExpiryCondition(since_ms=400), "simple": ExpiryCondition()}
    expired = store.expired(1000, retention_ms=500, condition=rules.get)
    # busy: no condition (rebalancing); idle: empty since 400, so every offset of it (even
    # one committed at 900) is 600 ms old; simple: from each commit
    assert sorted(expired) == [("idle", ("t", 0)), ("idle", ("u", 0)), ("simple", ("t", 0))]
    assert store.of_topics(["t"]) == [("busy", ("t", 0)), ("idle", ("t", 0)), ("simple", ("t", 0))]


def test_an_explicit_expiry_wins_but_not_over_a_subscription_or_a_missing_condition() -> None:
    store = OffsetStore()
    for group in ("stable", "rebalancing", "empty"):
        for topic in ("t", "u"):
            value = OffsetCommitValue(
                offset=1, metadata="", commit_timestamp=0, expire_timestamp=50
            )
            store.apply(OffsetRecord(group, topic, 0, value))
    rules = {
        "stable": ExpiryCondition(subscribed=frozenset({"t"})),
        "empty": ExpiryCondition(since_ms=40),  # retention from 40 would not be over at 60
    }
    assert store.expired(49, retention_ms=10_000, condition=rules.get) == []
    expired = store.expired(60, retention_ms=10_000, condition=rules.get)
    assert sorted(expired) == [("empty", ("t", 0)), ("empty", ("u", 0)), ("stable", ("u", 0))]


def test_an_offset_with_a_commit_pending_does_not_expire() -> None:
    store = OffsetStore()
    _commit(store, "g", "t", 1, at=0)
    _commit(store, "g", "u", 1, at=0)
    expired = store.expired(1000, 500, lambda g: ExpiryCondition(), pending={("g", ("t", 0))})
    assert expired == [("g", ("u", 0))]


def test_an_explicit_expiry_is_written_as_a_v1_value_and_survives_a_reload() -> None:
    value = OffsetCommitValue(
        offset=7, leader_epoch=3, metadata="m", commit_timestamp=100, expire_timestamp=2100
    )
    key, encoded = encode_offset("g", "t", 0, value)
    assert encoded is not None and encoded[:2] == b"\x00\x01", "only v1 has expireTimestamp"
    record = decode(key, encoded)
    assert isinstance(record, OffsetRecord) and record.value is not None
    store = OffsetStore()
    store.apply(record)
    # v1 has no leader epoch (Kafka drops it too)
    assert store.get("g", ("t", 0)) == CommittedOffset(7, -1, "m", 100, 2100)
    _, plain = encode_offset("g", "t", 0, OffsetCommitValue(offset=7, commit_timestamp=100))
    assert plain is not None and plain[:2] == b"\x00\x03"
