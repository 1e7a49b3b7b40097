"""What the admin commands print: JSON, aligned tables (``-`` for no value, ``yes``/``no``),
and the one line a failed command writes on stderr before it exits with status 1."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence


def print_json(value: object) -> None:
    print(json.dumps(value, indent=2))


def print_result(as_json: bool, value: object, text: Callable[[], str]) -> int:
    """What an admin command prints on success: the REST answer as JSON with ``--json``, else
    its human text (built only then).  Returns the command's exit status."""
    if as_json:
        print_json(value)
    else:
        print(text())
    return 0


def format_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [max([len(h), *(len(r[i]) for r in cells)]) for i, h in enumerate(headers)]
    lines = [headers, *cells]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip() for line in lines
    )


def _cell(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list | tuple):
        return ",".join(str(v) for v in value) or "-"
    return str(value)


def fail(error: str, message: str) -> int:
    print(f"kraft: {error}: {message}", file=sys.stderr)
    return 1
