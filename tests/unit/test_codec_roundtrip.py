"""Every message, header and record schema at every version: decode(encode(x)) == x and
encode(decode(b)) == b, with values drawn from the spec (tests/protocol_strategies.py)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from protocol_strategies import cases, message_strategy


@pytest.mark.parametrize(("package", "name", "version"), cases())
@given(data=st.data())
def test_round_trip(package: str, name: str, version: int, data: Any) -> None:
    message = data.draw(message_strategy(package, name, version))
    encoded = message.encode(version)
    decoded = type(message).decode(encoded, version)
    assert decoded == message
    assert decoded.encode(version) == encoded
    # The chunked form (zero-copy records) carries the same bytes.
    assert b"".join(bytes(c) for c in message.encode_chunks(version)) == encoded


def test_every_api_key_is_covered() -> None:
    from kafka_protocol.messages import APIS

    covered = {name for _, name, _ in cases()}
    assert set(range(0, 88)) <= set(APIS)
    for request, response in APIS.values():
        assert request in covered and response in covered
