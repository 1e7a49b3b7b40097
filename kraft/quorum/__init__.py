"""The controller quorum: a replicated, epoch-fenced metadata log on top of pysyncobj.

Layout (one noun per module):

- ``codec``: the versioned entry header (pure).
- ``state``: the deterministic apply rules: dense offsets and epoch fencing (pure).
- ``memnet``: an in-memory network for deterministic simulation (pure, no pysyncobj).
- ``fixed_syncobj``: pysyncobj's ``SyncObj`` with its safety holes closed (the
  acknowledged-write-loss fix, one vote per voter, journal flushing before acknowledgement):
  the only code that touches pysyncobj's private internals.
- ``raft``: the adapter on top of it; with ``fixed_syncobj``, the only modules that import
  pysyncobj.
- ``quorum_controller``: the controller state machine driven on the Raft log.
- ``local_controller``: the same state machine on a single node's local, durable log.
"""
