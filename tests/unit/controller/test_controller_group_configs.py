"""Group configs (KIP-848, resource type GROUP): the controller's validation of
IncrementalAlterConfigs / AlterConfigs on a group, and what DescribeConfigs reports."""

from __future__ import annotations

import pytest
from controller_helpers import alter, apply, cluster, make_controller

from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import AlterConfigsRequest
from kafka_protocol.metadata import ConfigRecord
from kraft.controller import Controller
from kraft.controller.configuration import OpType
from metadata_log.configs import ConfigSource
from metadata_log.group_configs import effective_group_config, group_int
from metadata_log.image import ClusterImage, ConfigResource

E = ErrorCode
GROUP = 32
SET, DELETE, APPEND = OpType.SET, OpType.DELETE, OpType.APPEND
SESSION, HEARTBEAT = "consumer.session.timeout.ms", "consumer.heartbeat.interval.ms"


@pytest.fixture
def controller() -> Controller:
    return make_controller()


@pytest.fixture
def image(controller: Controller) -> ClusterImage:
    return cluster(controller, {1: None})


def test_set_and_delete_a_group_config_of_a_group_that_does_not_exist(
    controller: Controller, image: ClusterImage
) -> None:
    result = controller.handle(alter(GROUP, "g", (SESSION, SET, "50000")), image)
    assert [
        (r.error_code, r.resource_type, r.resource_name) for r in result.response.responses
    ] == [(0, GROUP, "g")]
    assert result.records == [
        ConfigRecord(resource_type=GROUP, resource_name="g", name=SESSION, value="50000")
    ]
    image = apply(image, result)
    assert image.configs[ConfigResource(GROUP, "g")] == {SESSION: "50000"}
    image = apply(image, controller.handle(alter(GROUP, "g", (SESSION, DELETE, None)), image))
    assert image.configs.get(ConfigResource(GROUP, "g"), {}) == {}


@pytest.mark.parametrize(
    ("name", "ops", "code", "message"),
    [
        ("", [(SESSION, SET, "50000")], E.INVALID_REQUEST, "Default group resources"),
        ("g", [("share.session.timeout.ms", SET, "50000")], E.INVALID_CONFIG, "Unknown group"),
        ("g", [("session.timeout.ms", SET, "50000")], E.INVALID_CONFIG, "Unknown group config"),
        ("g", [(SESSION, SET, "abc")], E.INVALID_CONFIG, "Invalid value abc"),
        ("g", [(SESSION, SET, "0")], E.INVALID_CONFIG, "at least 1"),
        ("g", [(SESSION, SET, "44999")], E.INVALID_CONFIG, "greater than or equal to group.consu"),
        ("g", [(SESSION, SET, "60001")], E.INVALID_CONFIG, "less than or equal to group.consumer"),
        ("g", [(HEARTBEAT, SET, "4999")], E.INVALID_CONFIG, "min.heartbeat.interval.ms"),
        ("g", [(HEARTBEAT, SET, "15001")], E.INVALID_CONFIG, "max.heartbeat.interval.ms"),
        ("g", [(HEARTBEAT, APPEND, "1")], E.INVALID_CONFIG, "not LIST"),
    ],
)
def test_refused_group_configs_change_nothing(
    controller: Controller,
    image: ClusterImage,
    name: str,
    ops: list[tuple[str, int, str | None]],
    code: int,
    message: str,
) -> None:
    result = controller.handle(alter(GROUP, name, *ops), image)
    (response,) = result.response.responses
    assert response.error_code == code, response.error_message
    assert message in (response.error_message or "")
    assert result.records == []


def test_bounds_are_the_controllers_group_consumer_settings(image: ClusterImage) -> None:
    lowered = make_controller(
        static_broker_config={
            "group.consumer.min.heartbeat.interval.ms": "100",
            "group.consumer.min.session.timeout.ms": "1000",
        }
    )
    ok = lowered.handle(alter(GROUP, "g", (HEARTBEAT, SET, "200"), (SESSION, SET, "1000")), image)
    assert ok.response.responses[0].error_code == 0 and len(ok.records) == 2
    # the session timeout must stay above the heartbeat interval, a key not given counting at
    # its default (45 s / 5 s)
    bad = lowered.handle(alter(GROUP, "g", (HEARTBEAT, SET, "1000"), (SESSION, SET, "1000")), image)
    assert bad.response.responses[0].error_code == E.INVALID_CONFIG
    assert bad.response.responses[0].error_message == f"{SESSION} must be greater than {HEARTBEAT}"


def test_legacy_alter_configs_replaces_a_groups_set(
    controller: Controller, image: ClusterImage
) -> None:
    def legacy(configs: dict[str, str]) -> AlterConfigsRequest:
        items = [AlterConfigsRequest.AlterableConfig(name=k, value=v) for k, v in configs.items()]
        resource = AlterConfigsRequest.AlterConfigsResource(
            resource_type=GROUP, resource_name="g", configs=items
        )
        return AlterConfigsRequest(resources=[resource])

    image = apply(image, controller.handle(legacy({SESSION: "50000", HEARTBEAT: "6000"}), image))
    result = controller.handle(legacy({HEARTBEAT: "7000"}), image)
    assert result.response.responses[0].error_code == 0
    assert apply(image, result).configs[ConfigResource(GROUP, "g")] == {HEARTBEAT: "7000"}
    refused = controller.handle(legacy({"nope": "1"}), image)
    assert refused.response.responses[0].error_code == E.INVALID_CONFIG and not refused.records


def test_describe_reports_the_override_else_the_brokers_value() -> None:
    broker = {"group.consumer.session.timeout.ms": "6000"}
    entries = effective_group_config({HEARTBEAT: "700"}, broker)
    assert list(entries) == [HEARTBEAT, SESSION]
    heartbeat, session = entries[HEARTBEAT], entries[SESSION]
    assert (heartbeat.value, heartbeat.source, heartbeat.is_default) == (
        "700",
        ConfigSource.GROUP_CONFIG,
        False,
    )
    assert (session.value, session.source, session.is_default) == (
        "6000",
        ConfigSource.DEFAULT_CONFIG,
        True,
    )
    assert [(s.name, s.value, s.source) for s in session.synonyms] == [
        (SESSION, "6000", ConfigSource.DEFAULT_CONFIG)
    ]
    assert not session.read_only and session.config_type == 3  # INT
    assert effective_group_config({}, {})[SESSION].value == "45000"


def test_the_coordinator_ignores_an_invalid_stored_override() -> None:
    assert group_int(HEARTBEAT, {HEARTBEAT: "700"}, 5000) == 700
    assert group_int(HEARTBEAT, {HEARTBEAT: "x"}, 5000) == 5000
    assert group_int(HEARTBEAT, {}, 5000) == 5000
