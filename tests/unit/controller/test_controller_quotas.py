"""The controller's AlterClientQuotas rule (``kraft.controller.quotas``)."""

from __future__ import annotations

from typing import Any

from controller_helpers import make_controller, run

from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import AlterClientQuotasRequest
from metadata_log.image import ClusterImage

A = AlterClientQuotasRequest
Pairs = list[tuple[str, str | None]]


def request(
    *changes: tuple[Pairs, dict[str, float | None]], validate_only: bool = False
) -> AlterClientQuotasRequest:
    return A(
        entries=[
            A.EntryData(
                entity=[A.EntityData(entity_type=t, entity_name=n) for t, n in pairs],
                ops=[A.OpData(key=k, value=v or 0.0, remove=v is None) for k, v in ops.items()],
            )
            for pairs, ops in changes
        ],
        validate_only=validate_only,
    )


def alter(
    image: ClusterImage,
    *changes: tuple[Pairs, dict[str, float | None]],
    validate_only: bool = False,
) -> tuple[ClusterImage, list[int], list[Any]]:
    controller = make_controller()
    result = controller.handle(request(*changes, validate_only=validate_only), image)
    image, response = run(
        controller, image, "handle", request(*changes, validate_only=validate_only)
    )
    return image, [e.error_code for e in response.entries], result.records


ALICE: Pairs = [("user", "alice")]
APP_OF_ALICE: Pairs = [("client-id", "app"), ("user", "alice")]


def test_set_change_and_remove() -> None:
    image, errors, records = alter(
        ClusterImage.EMPTY,
        (ALICE, {"producer_byte_rate": 100.0}),
        (APP_OF_ALICE, {"request_percentage": 12.5}),
    )
    assert errors == [0, 0] and len(records) == 2
    assert image.client_quotas == {
        (("user", "alice"),): {"producer_byte_rate": 100.0},
        (("client-id", "app"), ("user", "alice")): {"request_percentage": 12.5},
    }
    # unchanged values write nothing; removing an absent key writes nothing
    same, errors, records = alter(
        image, (ALICE, {"producer_byte_rate": 100.0, "consumer_byte_rate": None})
    )
    assert errors == [0] and records == [] and same == image
    image, errors, _ = alter(image, (ALICE, {"producer_byte_rate": None}))
    assert errors == [0] and (("user", "alice"),) not in image.client_quotas


def test_a_bad_entry_changes_nothing_of_its_own_and_the_others_apply() -> None:
    image, errors, _ = alter(
        ClusterImage.EMPTY,
        (ALICE, {"producer_byte_rate": 1.0, "no_such_key": 1.0}),
        ([("user", "bob")], {"consumer_byte_rate": -5.0}),
        ([("user", "carol")], {"producer_byte_rate": 0.0}),
        ([("user", "dan")], {"producer_byte_rate": 2.5}),  # fractional LONG
        ([("client-id", "x"), ("client-id", "y")], {"producer_byte_rate": 1.0}),
        ([], {"producer_byte_rate": 1.0}),
        ([("group", "g")], {"producer_byte_rate": 1.0}),
        ([("ip", "1.2.3.4")], {"producer_byte_rate": 1.0}),  # not an ip key
        ([("user", "eve")], {"producer_byte_rate": 1.0}),
        ([("user", "eve")], {"producer_byte_rate": 2.0}),  # the same entity twice
        ([("user", "ok")], {"request_percentage": 0.5}),
    )
    invalid = ErrorCode.INVALID_REQUEST
    assert errors == [invalid] * 8 + [0, invalid, 0]
    assert image.client_quotas == {
        (("user", "eve"),): {"producer_byte_rate": 1.0},
        (("user", "ok"),): {"request_percentage": 0.5},
    }


def test_validate_only_answers_without_records() -> None:
    image, errors, records = alter(
        ClusterImage.EMPTY, (ALICE, {"producer_byte_rate": 1.0}), validate_only=True
    )
    assert errors == [0] and records == [] and image.client_quotas == {}
    _, errors, _ = alter(ClusterImage.EMPTY, (ALICE, {"bad": 1.0}), validate_only=True)
    assert errors == [ErrorCode.INVALID_REQUEST]
