"""The controller quorum: a replicated, epoch-fenced metadata log on top of pysyncobj.

Layout (one noun per module):

- ``codec``: the versioned entry header (pure).
- ``state``: the deterministic apply rules: dense offsets and epoch fencing (pure).
- ``memnet``: an in-memory network for deterministic simulation (pure, no pysyncobj).
- ``fixed_syncobj``: pysyncobj's ``SyncObj`` with its safety holes closed (the
  acknowledged-write-loss fix, one vote per voter, journal flushing before acknowledgement,
  term and vote fsynced).
- ``bounded_transport``: pysyncobj's TCP transport with bounded input, voters only.
  With ``fixed_syncobj``, the only code that touches pysyncobj's private internals.
- ``journal_snapshot``: the file a compacted journal's prefix becomes (counters and a
  metadata snapshot of the image) and the serializer that writes and reads it.
- ``raft``: the adapter on top of them; with them, the only modules that import pysyncobj.
- ``quorum_controller``: the controller state machine driven on the Raft log.
- ``local_controller``: the same state machine on a single node's local, durable log.
"""
