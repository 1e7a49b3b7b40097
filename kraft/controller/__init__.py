"""The controller: a deterministic state machine over the metadata image.

Theory of operation (Kafka's ``QuorumController``)
--------------------------------------------------
A command (an admin request forwarded by a broker, BrokerRegistration, BrokerHeartbeat,
AllocateProducerIds, AlterPartition, session expiry, the periodic unclean-election check and
leader rebalance) is handled by a pure function of the request and the current
:class:`~metadata_log.image.ClusterImage`. It returns a :class:`ControllerResult`: the metadata
records that express the change and the response to send once they are durable. The controller
holds no state: the records are appended to the metadata log as one batch and replayed
(``metadata_log.delta``) into the next image, the same way on the active controller, on standby
controllers and on brokers. Randomness (topic ids, replica placement) comes from an injected
``random.Random``.

Modules: ``controller`` (the entry points, and the rule of each forwarded request), ``topics``
(topic commands), ``configuration`` (config commands), ``cluster`` (brokers), ``producer_ids``
(producer-id blocks), ``partitions`` (leader election and ISR rules), ``elections`` (elections
asked by admins, unclean elections and the preferred-leader rebalance), ``alter_partition`` (ISR
changes asked by leaders), ``placement`` (the striped replica placer). The drivers that run these
commands against a log live in :mod:`kraft.quorum` (``local_controller`` for a single node,
``quorum_controller`` on Raft).
"""

from kraft.controller.controller import Controller
from kraft.controller.result import (
    ControllerApiError,
    ControllerConfig,
    ControllerResult,
    CreateTopicPolicyRequest,
)

__all__ = [
    "Controller",
    "ControllerApiError",
    "ControllerConfig",
    "ControllerResult",
    "CreateTopicPolicyRequest",
]
