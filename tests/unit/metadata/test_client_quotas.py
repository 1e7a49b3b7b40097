"""Client quotas in the image: replay, DescribeClientQuotas filters, Kafka's precedence of
entities (``metadata_log.client_quotas``)."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafka_protocol.metadata import ClientQuotaRecord
from metadata_log.client_quotas import (
    ClientQuotas,
    FilterComponent,
    InvalidQuotaFilter,
    QuotaEntity,
    describe,
    quota_entity,
    resolve,
    set_record,
)
from metadata_log.delta import replay_records
from metadata_log.image import ClusterImage

EXACT, DEFAULT, ANY = 0, 1, 2
USER, CLIENT = "user", "client-id"


def image_with(quotas: dict[QuotaEntity, dict[str, float]]) -> ClusterImage:
    records = [set_record(e, k, v) for e, values in quotas.items() for k, v in values.items()]
    return replay_records(ClusterImage.EMPTY, list(records))


def entity(**names: str | None) -> QuotaEntity:
    return quota_entity((k.replace("_", "-"), v) for k, v in names.items())


def test_records_set_and_remove_keys_and_the_last_removal_drops_the_entity() -> None:
    e = entity(user="alice", client_id="app")
    image = image_with({e: {"producer_byte_rate": 10.0, "request_percentage": 5.0}})
    assert image.client_quotas == {e: {"producer_byte_rate": 10.0, "request_percentage": 5.0}}
    remove = ClientQuotaRecord(
        entity=[ClientQuotaRecord.EntityData(entity_type=t, entity_name=n) for t, n in e],
        key="producer_byte_rate",
        remove=True,
    )
    image = replay_records(image, [remove])
    assert image.client_quotas == {e: {"request_percentage": 5.0}}
    image = replay_records(image, [set_record(e, "request_percentage", 7.0)])
    assert image.client_quotas == {e: {"request_percentage": 7.0}}
    gone = replay_records(image, [dataclasses.replace(remove, key="request_percentage")])
    assert gone.client_quotas == {} and gone.is_empty


def test_records_naming_no_valid_entity_are_ignored() -> None:
    bad = ClientQuotaRecord(
        entity=[ClientQuotaRecord.EntityData(entity_type="group", entity_name="g")],
        key="producer_byte_rate",
        value=1.0,
    )
    after = replay_records(ClusterImage.EMPTY, [bad])
    assert after.client_quotas == {} and after.offset == 0


QUOTAS: ClientQuotas = image_with(
    {
        entity(user="alice", client_id="app"): {"producer_byte_rate": 1.0},
        entity(user="alice", client_id=None): {"producer_byte_rate": 2.0},
        entity(user="alice"): {"producer_byte_rate": 3.0, "consumer_byte_rate": 30.0},
        entity(user=None, client_id="app"): {"producer_byte_rate": 4.0},
        entity(user=None, client_id=None): {"producer_byte_rate": 5.0},
        entity(user=None): {"producer_byte_rate": 6.0},
        entity(client_id="app"): {"producer_byte_rate": 7.0},
        entity(client_id=None): {"producer_byte_rate": 8.0, "request_percentage": 80.0},
    }
).client_quotas


def filtered(*components: tuple[str, int, str | None], strict: bool = False) -> set[QuotaEntity]:
    return {e for e, _ in describe(QUOTAS, [FilterComponent(*c) for c in components], strict)}


def test_describe_matches_exact_default_and_any() -> None:
    assert filtered() == set(QUOTAS)
    assert filtered((USER, EXACT, "alice")) == {
        entity(user="alice", client_id="app"),
        entity(user="alice", client_id=None),
        entity(user="alice"),
    }
    assert filtered((USER, EXACT, "alice"), strict=True) == {entity(user="alice")}
    assert filtered((USER, DEFAULT, None), (CLIENT, ANY, None)) == {
        entity(user=None, client_id="app"),
        entity(user=None, client_id=None),
    }
    assert filtered((CLIENT, ANY, None), strict=True) == {
        entity(client_id="app"),
        entity(client_id=None),
    }
    assert filtered((USER, EXACT, "nobody")) == set()


@pytest.mark.parametrize(
    ("components", "unsupported"),
    [
        ([(USER, EXACT, None)], False),
        ([(USER, DEFAULT, "x")], False),
        ([(USER, ANY, "x")], False),
        ([(USER, ANY, None), (USER, EXACT, "a")], False),
        ([("", ANY, None)], False),
        ([(USER, 3, None)], False),
        ([("ip", ANY, None), (CLIENT, ANY, None)], False),
        ([("group", ANY, None)], True),
    ],
)
def test_describe_refuses_bad_filters(
    components: list[tuple[str, int, str | None]], unsupported: bool
) -> None:
    with pytest.raises(InvalidQuotaFilter) as refused:
        describe(QUOTAS, [FilterComponent(*c) for c in components], False)
    assert refused.value.unsupported == unsupported


# Kafka's documented order, most specific first, with the value each level holds above.
PRECEDENCE = [
    (entity(user="alice", client_id="app"), 1.0, ("alice", "app")),
    (entity(user="alice", client_id=None), 2.0, ("alice", "app")),
    (entity(user="alice"), 3.0, ("alice", "")),
    (entity(user=None, client_id="app"), 4.0, ("alice", "app")),
    (entity(user=None, client_id=None), 5.0, ("alice", "app")),
    (entity(user=None), 6.0, ("alice", "")),
    (entity(client_id="app"), 7.0, ("", "app")),
    (entity(client_id=None), 8.0, ("", "app")),
]


@given(st.sets(st.integers(0, len(PRECEDENCE) - 1)))
def test_the_most_specific_entity_setting_the_key_wins(present: set[int]) -> None:
    quotas = {PRECEDENCE[i][0]: QUOTAS[PRECEDENCE[i][0]] for i in present}
    found = resolve(quotas, "alice", "app", "producer_byte_rate")
    if not present:
        assert found is None
        return
    _, bound, (user_tag, client_tag) = PRECEDENCE[min(present)]
    assert found is not None
    assert (found.bound, found.user_tag, found.client_id_tag) == (bound, user_tag, client_tag)


def test_each_key_resolves_on_its_own() -> None:
    consumer = resolve(QUOTAS, "alice", "other", "consumer_byte_rate")
    assert consumer is not None and (consumer.bound, consumer.user_tag) == (30.0, "alice")
    request = resolve(QUOTAS, "bob", "x", "request_percentage")
    assert request is not None and (request.bound, request.client_id_tag) == (80.0, "x")
    assert resolve(QUOTAS, "bob", "x", "controller_mutation_rate") is None
