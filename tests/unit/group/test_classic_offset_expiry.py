"""When a classic group's committed offsets may expire (Kafka's
``ClassicGroup.offsetExpirationCondition``, KIP-211), for the group in each of its states."""

from __future__ import annotations

import random

from classic_harness import CONFIG, DELAY_MS, Harness, keep_alive

from broker.coordinator.classic_groups import offset_expiry_condition
from broker.coordinator.offsets import CommittedOffset, ExpiryCondition, explicit_expiry
from broker.group.classic import ClassicGroup
from broker.group.classic_member import GroupState
from kafka_protocol.coordinator.group_metadata_value import GroupMetadataValue
from kafka_protocol.messages import ConsumerProtocolSubscription


def subscription(*topics: str) -> bytes:
    version = 1
    body = ConsumerProtocolSubscription(topics=list(topics)).encode(version)
    return version.to_bytes(2, "big") + bytes(body)


def test_only_the_default_retention_time_leaves_expiry_to_the_broker() -> None:
    now = 1_700_000_000_000
    assert explicit_expiry(-1, now) == -1
    assert explicit_expiry(0, now) == now
    assert explicit_expiry(60_000, now) == now + 60_000
    # Kafka takes any other negative value as it is: offsets already past their expiry
    expire = explicit_expiry(-5, now)
    assert expire == now - 5
    offset = CommittedOffset(7, -1, "", commit_timestamp_ms=now, expire_timestamp_ms=expire)
    assert ExpiryCondition(since_ms=now).is_expired("t", offset, now, retention_ms=10**9)


def test_a_simple_consumers_offsets_expire_from_each_commit() -> None:
    assert offset_expiry_condition(None) == ExpiryCondition()
    h = Harness(now_ms=5)  # a group without a protocol type (no member ever joined)
    assert h.group.protocol_type is None
    assert offset_expiry_condition(h.group) == ExpiryCondition()


def test_an_empty_groups_offsets_expire_from_when_it_became_empty() -> None:
    h = Harness()
    (a,) = h.stable_group(1)
    keep_alive(h, a, h.group.generation_id, until_ms=h.now_ms + 60_000)
    h.leave((a, None))
    assert h.group.state is GroupState.EMPTY
    assert offset_expiry_condition(h.group) == ExpiryCondition(since_ms=h.now_ms)


def test_a_stable_consumer_group_keeps_the_offsets_of_its_subscriptions() -> None:
    h = Harness()
    h.stable_group(2, protocols=(("range", subscription("orders", "audit")),))
    assert offset_expiry_condition(h.group) == ExpiryCondition(
        subscribed=frozenset({"orders", "audit"})
    )


def test_nothing_expires_while_the_subscriptions_are_unknown_or_it_rebalances() -> None:
    h = Harness()
    h.stable_group(1)  # "sub": not a ConsumerProtocolSubscription
    assert h.group.state is GroupState.STABLE
    assert offset_expiry_condition(h.group) is None
    h.new_member()
    assert h.group.state is GroupState.PREPARING_REBALANCE
    assert offset_expiry_condition(h.group) is None
    connect = Harness()
    connect.stable_group(1, protocol_type="connect")  # not the consumer protocol
    assert offset_expiry_condition(connect.group) is None


def test_a_group_restored_without_a_state_timestamp_expires_from_each_commit() -> None:
    old = GroupMetadataValue(protocol_type="consumer", generation=4, current_state_timestamp=-1)
    group = ClassicGroup.restore("g", old, CONFIG, random.Random(0), now_ms=DELAY_MS)
    assert group.state is GroupState.EMPTY and group.current_state_timestamp_ms is None
    assert offset_expiry_condition(group) == ExpiryCondition()
    value = GroupMetadataValue(protocol_type="consumer", generation=4, current_state_timestamp=77)
    group = ClassicGroup.restore("g", value, CONFIG, random.Random(0), now_ms=DELAY_MS)
    assert offset_expiry_condition(group) == ExpiryCondition(since_ms=77)
