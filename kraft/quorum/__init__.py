"""The controller quorum: a replicated, epoch-fenced metadata log on top of pysyncobj.

Layout (one noun per module):

- ``codec``: the versioned entry header (pure).
- ``state``: the deterministic apply rules: dense offsets and epoch fencing (pure).
- ``memnet``: an in-memory network for deterministic simulation (pure, no pysyncobj).
- ``raft``: the adapter, the only module that imports pysyncobj, including the fix for
  pysyncobj's acknowledged-write-loss bug and journal flushing before acknowledgement.
- ``quorum_controller``: the controller state machine driven on the Raft log.
- ``local_controller``: the same state machine on a single node's local, durable log.
"""
