"""Types of the compiled record walk (kafka_protocol/_record_walk.c)."""

from typing import Final, final

from typing_extensions import Buffer

@final
class RecordWalk(tuple[int, str | None, int, int, int, int, int]):
    """What :func:`walk_records` found: a problem, or what the validator checks next."""

    n_fields: Final[int]
    @property
    def bad_index(self) -> int: ...
    @property
    def problem(self) -> str | None: ...
    @property
    def min_timestamp_delta(self) -> int: ...
    @property
    def max_timestamp_delta(self) -> int: ...
    @property
    def min_timestamp_index(self) -> int: ...
    @property
    def max_timestamp_index(self) -> int: ...
    @property
    def first_null_key(self) -> int: ...

def walk_records(records: Buffer, count: int, last_offset_delta: int, /) -> RecordWalk: ...
