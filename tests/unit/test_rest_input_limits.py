"""The REST API's JSON nesting check, against the nesting of the values that were encoded."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from kraft.rest.common import json_nesting_exceeds

tricky_text = st.text(alphabet='[]{}"\\ab\n\u00e9', max_size=8)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | tricky_text,
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(tricky_text, children, max_size=3)
    ),
    max_leaves=40,
)


def nesting(value: Any) -> int:
    if isinstance(value, list):
        return 1 + max(map(nesting, value), default=0)
    if isinstance(value, dict):
        return 1 + max(map(nesting, value.values()), default=0)
    return 0


@given(json_values, st.integers(0, 12), st.booleans())
def test_nesting_is_measured_outside_strings(value: Any, limit: int, ascii_only: bool) -> None:
    raw = json.dumps(value, ensure_ascii=ascii_only).encode()
    assert json_nesting_exceeds(raw, limit) == (nesting(value) > limit)


def test_deep_input_is_measured_without_recursion() -> None:
    assert json_nesting_exceeds(b"[" * 1_000_000, 64)
    assert not json_nesting_exceeds(b"[" * 64 + b"]" * 64, 64)
    assert json_nesting_exceeds(b"[" * 65 + b"]" * 65, 64)
    assert not json_nesting_exceeds(b'"' + b"[" * 1000 + b'"', 64)
    assert not json_nesting_exceeds(b"[" + b"[]," * 10_000 + b"[]]", 2)
