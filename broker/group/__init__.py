"""Consumer groups, sans-IO: the classic protocol's rules for one group (``classic``), the
group's state (``classic_state``), its members and protocol choice (``classic_member``), what a
call hands back (``classic_outcome``) and the group's ``__consumer_offsets`` record
(``classic_records``)."""
