"""How ``kraft consume`` prints a record, whichever way it was read (REST, or Kafka Fetch as a
group member): the value (``KEY<SEP>VALUE`` with ``--print-key``, ``null`` for none), or one
JSON object per line with ``--json``."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import IO, Any, NamedTuple


class Consumed(NamedTuple):
    """A record to print, however it was read (REST here, Kafka Fetch with --group)."""

    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: Sequence[tuple[str, bytes | None]]


@dataclass
class Printer:
    out: IO[bytes]
    json_lines: bool
    print_key: bool
    key_separator: bytes
    count: int = 0

    def write(self, record: Consumed) -> None:
        if self.json_lines:
            line = json.dumps(_decoded(record)).encode()
        else:
            line = b"null" if record.value is None else record.value
            if self.print_key:
                line = (b"null" if record.key is None else record.key) + self.key_separator + line
        self.out.write(line + b"\n")
        self.count += 1


def _decoded(record: Consumed) -> dict[str, Any]:
    def text(data: bytes | None) -> str | None:
        return None if data is None else data.decode(errors="replace")

    return {
        "partition": record.partition,
        "offset": record.offset,
        "timestamp": record.timestamp,
        "key": text(record.key),
        "value": text(record.value),
        "headers": {k: text(v) for k, v in record.headers},
    }
