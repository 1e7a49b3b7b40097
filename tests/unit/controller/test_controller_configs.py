"""IncrementalAlterConfigs and AlterConfigs on TOPIC and BROKER resources."""

from __future__ import annotations

import random
from collections.abc import Mapping

import pytest
from controller_helpers import alter, apply, cluster, create, make_controller, new_topic, run

from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import AlterConfigsRequest, IncrementalAlterConfigsRequest
from kafka_protocol.metadata import ConfigRecord
from kraft.controller import Controller, ControllerConfig
from kraft.controller.configuration import OpType
from metadata_log.image import ClusterImage, ConfigResource

E = ErrorCode
TOPIC, BROKER = 2, 4
SET, DELETE, APPEND, SUBTRACT = OpType.SET, OpType.DELETE, OpType.APPEND, OpType.SUBTRACT


@pytest.fixture
def controller() -> Controller:
    return make_controller()


@pytest.fixture
def image(controller: Controller) -> ClusterImage:
    image = cluster(controller, {1: None})
    image, _ = run(
        controller,
        image,
        "handle",
        create(new_topic("t", configs={"retention.ms": "100"})),
    )
    return image


def answer(
    controller: Controller, image: ClusterImage, request: IncrementalAlterConfigsRequest
) -> tuple[ClusterImage, int, str | None]:
    result = controller.handle(request, image)
    (response,) = result.response.responses
    return apply(image, result), response.error_code, response.error_message


def test_set_delete_append_subtract(controller: Controller, image: ClusterImage) -> None:
    image, code, _ = answer(
        controller,
        image,
        alter(
            TOPIC,
            "t",
            ("retention.ms", DELETE, None),
            ("segment.ms", SET, "1000"),
            ("cleanup.policy", APPEND, "compact"),
        ),
    )
    assert code == 0
    assert image.topic_configs("t") == {"segment.ms": "1000", "cleanup.policy": "delete,compact"}
    image, code, _ = answer(
        controller, image, alter(TOPIC, "t", ("cleanup.policy", SUBTRACT, "delete"))
    )
    assert code == 0 and image.topic_configs("t")["cleanup.policy"] == "compact"
    image, code, _ = answer(
        controller, image, alter(TOPIC, "t", ("cleanup.policy", APPEND, "compact"))
    )
    assert image.topic_configs("t")["cleanup.policy"] == "compact", "APPEND does not duplicate"


def test_unchanged_topic_values_write_no_record(
    controller: Controller, image: ClusterImage
) -> None:
    result = controller.handle(
        alter(TOPIC, "t", ("retention.ms", SET, "100"), ("segment.ms", DELETE, None)), image
    )
    assert result.records == [] and result.response.responses[0].error_code == 0


@pytest.mark.parametrize(
    ("resource_type", "name", "ops", "code", "message"),
    [
        (
            TOPIC,
            "nope",
            [("retention.ms", SET, "1")],
            E.UNKNOWN_TOPIC_OR_PARTITION,
            "The topic 'nope' does not exist.",
        ),
        (TOPIC, "bad name", [("retention.ms", SET, "1")], E.INVALID_REQUEST, "Illegal topic name."),
        (
            TOPIC,
            "t",
            [("retention.ms", SET, "x")],
            E.INVALID_CONFIG,
            "Invalid value x for configuration retention.ms",
        ),
        (TOPIC, "t", [("bogus", SET, "1")], E.INVALID_CONFIG, "Unknown topic config name: bogus"),
        (
            TOPIC,
            "t",
            [("retention.ms", APPEND, "1")],
            E.INVALID_CONFIG,
            "Can't APPEND to key retention.ms because its type is not LIST.",
        ),
        (
            TOPIC,
            "t",
            [("cleanup.policy", SUBTRACT, None)],
            E.INVALID_REQUEST,
            "Null value not supported for SUBTRACT.",
        ),
        (TOPIC, "t", [("cleanup.policy", 9, "x")], E.INVALID_REQUEST, "Unknown operation type 9."),
        (
            TOPIC,
            "t",
            [("segment.ms", SET, "1"), ("segment.ms", DELETE, None)],
            E.INVALID_REQUEST,
            "Error due to duplicate config keys",
        ),
        (
            TOPIC,
            "t",
            [("cleanup.policy", APPEND, "keep")],
            E.INVALID_CONFIG,
            "String must be one of: compact, delete",
        ),
        (
            BROKER,
            "x",
            [("log.retention.ms", SET, "1")],
            E.INVALID_REQUEST,
            "Illegal non-integral BROKER resource type name.",
        ),
        (
            BROKER,
            "-1",
            [("log.retention.ms", SET, "1")],
            E.INVALID_REQUEST,
            "Illegal negative broker ID in BROKER resource.",
        ),
        (
            BROKER,
            "",
            [("node.id", SET, "1")],
            E.INVALID_CONFIG,
            "Cannot update these configs dynamically: [node.id]",
        ),
        (
            BROKER,
            "",
            [("message.max.bytes", SET, "-5")],
            E.INVALID_CONFIG,
            "Value must be at least 0",
        ),
        (
            8,
            "1",
            [("kafka.server", SET, "DEBUG")],
            E.INVALID_REQUEST,
            "Unsupported resource type BROKER_LOGGER.",
        ),
        (99, "x", [("a", SET, "b")], E.UNSUPPORTED_VERSION, "Unknown resource type 99."),
    ],
)
def test_errors(
    controller: Controller,
    image: ClusterImage,
    resource_type: int,
    name: str,
    ops: list[tuple[str, int, str | None]],
    code: int,
    message: str,
) -> None:
    result = controller.handle(alter(resource_type, name, *ops), image)
    (response,) = result.response.responses
    assert response.error_code == code and message in (response.error_message or "")
    assert (response.resource_type, response.resource_name) == (resource_type, name)
    assert result.records == []


def test_broker_resources(controller: Controller, image: ClusterImage) -> None:
    image, code, _ = answer(controller, image, alter(BROKER, "", ("log.retention.ms", SET, "5")))
    assert code == 0 and image.configs[ConfigResource(BROKER, "")] == {"log.retention.ms": "5"}
    result = controller.handle(alter(BROKER, "1", ("log.retention.ms", SET, "6")), image)
    assert result.records == [
        ConfigRecord(resource_type=BROKER, resource_name="1", name="log.retention.ms", value="6")
    ]
    again = controller.handle(alter(BROKER, "", ("log.retention.ms", SET, "5")), image)
    assert len(again.records) == 1, "broker configs are written even when unchanged"
    image, code, _ = answer(
        controller, image, alter(BROKER, "", ("log.cleanup.policy", APPEND, "compact"))
    )
    assert image.configs[ConfigResource(BROKER, "")]["log.cleanup.policy"] == "delete,compact"


def test_duplicate_resources_and_validate_only(controller: Controller, image: ClusterImage) -> None:
    request = alter(TOPIC, "t", ("segment.ms", SET, "1"))
    request.resources = request.resources * 3
    result = controller.handle(request, image)
    assert [(r.error_code, r.error_message) for r in result.response.responses] == [
        (E.INVALID_REQUEST, "Duplicate resource.")
    ]
    result = controller.handle(
        alter(TOPIC, "t", ("segment.ms", SET, "1"), validate_only=True), image
    )
    assert result.records == [] and result.response.responses[0].error_code == 0


def test_each_resource_stands_alone(controller: Controller, image: ClusterImage) -> None:
    request = alter(TOPIC, "t", ("segment.ms", SET, "1"))
    request.resources += alter(TOPIC, "nope", ("segment.ms", SET, "1")).resources
    result = controller.handle(request, image)
    assert [r.error_code for r in result.response.responses] == [0, E.UNKNOWN_TOPIC_OR_PARTITION]
    assert apply(image, result).topic_configs("t")["segment.ms"] == "1"


def test_alter_config_policy(image: ClusterImage) -> None:
    def policy(resource: ConfigResource, configs: Mapping[str, str]) -> str | None:
        return "no compaction here" if "compact" in configs.get("cleanup.policy", "") else None

    controller = Controller(ControllerConfig(alter_config_policy=policy), rng=random.Random(0))
    _, code, message = answer(
        controller, image, alter(TOPIC, "t", ("cleanup.policy", SET, "compact"))
    )
    assert (code, message) == (E.POLICY_VIOLATION, "no compaction here")


def test_topic_deletion_removes_its_configs(controller: Controller, image: ClusterImage) -> None:
    from kafka_protocol.messages import DeleteTopicsRequest

    image = apply(image, controller.handle(DeleteTopicsRequest(topic_names=["t"]), image))
    assert ConfigResource(TOPIC, "t") not in image.configs


# --- AlterConfigs -----------------------------------------------------------------------------


def legacy(resource_type: int, name: str, configs: dict[str, str | None]) -> AlterConfigsRequest:
    return AlterConfigsRequest(
        resources=[
            AlterConfigsRequest.AlterConfigsResource(
                resource_type=resource_type,
                resource_name=name,
                configs=[
                    AlterConfigsRequest.AlterableConfig(name=k, value=v) for k, v in configs.items()
                ],
            )
        ]
    )


def test_alter_configs_replaces_the_set(controller: Controller, image: ClusterImage) -> None:
    result = controller.handle(legacy(TOPIC, "t", {"segment.ms": "1"}), image)
    assert result.response.responses[0].error_code == 0
    assert apply(image, result).topic_configs("t") == {"segment.ms": "1"}


@pytest.mark.parametrize(
    ("name", "configs", "code"),
    [
        ("t", {"segment.ms": None}, E.INVALID_REQUEST),
        ("t", {"segment.ms": "x"}, E.INVALID_CONFIG),
        ("nope", {"segment.ms": "1"}, E.UNKNOWN_TOPIC_OR_PARTITION),
    ],
)
def test_alter_configs_errors(
    controller: Controller,
    image: ClusterImage,
    name: str,
    configs: dict[str, str | None],
    code: int,
) -> None:
    result = controller.handle(legacy(TOPIC, name, configs), image)
    assert result.response.responses[0].error_code == code and result.records == []


def test_kerberos_listener_configs_are_dynamic_per_broker(
    controller: Controller, image: ClusterImage
) -> None:
    """As Kafka's DynamicListenerConfig: librdkafka's 0081-admin sets one per broker."""
    key = "sasl.kerberos.min.time.before.relogin"
    image, code, _ = answer(controller, image, alter(BROKER, "1", (key, SET, "58000")))
    assert code == 0 and image.configs[ConfigResource(BROKER, "1")] == {key: "58000"}
    _, code, message = answer(controller, image, alter(BROKER, "1", (key, SET, "soon")))
    assert code == E.INVALID_CONFIG and message is not None and key in message
    factor = "sasl.kerberos.ticket.renew.window.factor"
    _, code, _ = answer(controller, image, alter(BROKER, "", (factor, SET, "0.75")))
    assert code == 0
