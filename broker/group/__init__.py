"""Consumer groups, sans-IO.

The classic protocol: its rules for one group (``classic``), the group's state
(``classic_state``), its members and protocol choice (``classic_member``), what a call hands
back (``classic_outcome``) and the group's ``__consumer_offsets`` record (``classic_records``).

The consumer protocol of KIP-848: one group (``consumer``), a member and its reconciliation
(``consumer_member``), the server-side assignors (``consumer_assignors``), the heartbeat's
request rules (``consumer_heartbeat``) and the group's records (``consumer_records``).
"""
