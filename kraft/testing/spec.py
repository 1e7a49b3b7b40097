"""What cluster a test asks for (pure): brokers, controllers, partitions, security.

One controller and one broker run as a single combined node (one process, ~0.6 s to start),
unless ``combined=False``; any other shape runs each node as its own ``kraft server`` process,
as ``kraft dev --controllers M --brokers N`` does.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kraft.node.dev_cluster_plan import CONTROLLER_COUNTS, MAX_BROKERS

SPEC_FIELDS = ("brokers", "controllers", "partitions", "secure", "combined", "overrides")


class SpecError(ValueError):
    """A cluster spec that cannot be run; the message says what to change."""


@dataclass(frozen=True)
class ClusterSpec:
    """The shape of a test cluster.

    ``partitions``: the brokers' ``num.partitions`` (the default partition count of a topic
    created without one, by a client or by auto-creation).  ``secure``: SASL_SSL listeners with
    SCRAM-SHA-256/512 and PLAIN, a generated CA, and the super user ``admin``.  ``overrides``:
    more broker/controller settings (Kafka's keys), for every node.
    """

    brokers: int = 1
    controllers: int = 1
    partitions: int = 1
    secure: bool = False
    combined: bool | None = None  # None: combined when 1 + 1
    overrides: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.controllers not in CONTROLLER_COUNTS:
            raise SpecError(
                f"controllers={self.controllers}: use 1, 3 or 5 (a Raft majority needs an odd"
                " number)"
            )
        if not 1 <= self.brokers <= MAX_BROKERS:
            raise SpecError(f"brokers={self.brokers}: use 1 to {MAX_BROKERS}")
        if self.partitions < 1:
            raise SpecError(f"partitions={self.partitions}: use 1 or more")
        if self.combined and (self.brokers, self.controllers) != (1, 1):
            raise SpecError(
                f"combined=True runs one node that is both controller and broker; it cannot"
                f" have brokers={self.brokers}, controllers={self.controllers}"
            )
        bad = [k for k, v in self.overrides.items() if not isinstance(v, str) or not k]
        if bad:
            raise SpecError(f"overrides {bad}: keys and values must be non-empty strings")

    @property
    def is_combined(self) -> bool:
        return self.combined if self.combined is not None else self.node_count == 2

    @property
    def node_count(self) -> int:
        return self.brokers + self.controllers

    @property
    def id(self) -> str:
        """A short name for test ids and directories, e.g. ``1c3b-p3-secure``."""
        parts = ["combined" if self.is_combined else f"{self.controllers}c{self.brokers}b"]
        if self.partitions != 1:
            parts.append(f"p{self.partitions}")
        if self.secure:
            parts.append("secure")
        if self.overrides:
            parts.append("custom")
        return "-".join(parts)

    def __hash__(self) -> int:
        return hash(
            (
                self.brokers,
                self.controllers,
                self.partitions,
                self.secure,
                self.combined,
                tuple(sorted(self.overrides.items())),
            )
        )

    @classmethod
    def of(cls, value: object) -> ClusterSpec:
        """A spec from what a test passes: a :class:`ClusterSpec`, a mapping of its fields, or
        None (the default single node)."""
        if value is None:
            return cls()
        if isinstance(value, ClusterSpec):
            return value
        if isinstance(value, Mapping):
            unknown = sorted(set(value) - set(SPEC_FIELDS))
            if unknown:
                raise SpecError(
                    f"unknown cluster setting(s) {unknown}: use {', '.join(SPEC_FIELDS)}"
                )
            fields: dict[str, Any] = dict(value)
            return cls(**fields)
        raise SpecError(
            f"a cluster spec is a ClusterSpec or a dict such as {{'brokers': 3}}, not"
            f" {type(value).__name__} {value!r}"
        )
