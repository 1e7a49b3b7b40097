"""The client's half of version negotiation: KIP-511's v0 answer and retry, the version table,
and the common version."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafka_protocol.api_versions import (
    API_VERSIONS_VERSION,
    common_version,
    decode_response_or_v0,
    peer_versions,
    retry_version,
)
from kafka_protocol.errors import ErrorCode
from kafka_protocol.exceptions import ProtocolError
from kafka_protocol.framing import API_VERSIONS_KEY, encode_response
from kafka_protocol.messages import ApiVersionsResponse, MetadataResponse

Key = ApiVersionsResponse.ApiVersion


def answer(error: ErrorCode, *ranges: tuple[int, int, int]) -> ApiVersionsResponse:
    keys = [Key(api_key=k, min_version=lo, max_version=hi) for k, lo, hi in ranges]
    return ApiVersionsResponse(error_code=error, api_keys=keys)


def frame(response: ApiVersionsResponse | MetadataResponse, version: int) -> bytes:
    """A response as it arrives after its size prefix."""
    return b"".join(bytes(c) for c in encode_response(version, 7, response))[4:]


def test_a_broker_without_our_version_answers_v0_and_is_asked_again_at_its_highest() -> None:
    refusal = answer(ErrorCode.UNSUPPORTED_VERSION, (API_VERSIONS_KEY, 0, 2), (3, 0, 9))
    decoded = decode_response_or_v0(API_VERSIONS_KEY, API_VERSIONS_VERSION, frame(refusal, 0))
    assert decoded == refusal
    assert retry_version(refusal, API_VERSIONS_VERSION) == 2
    # a broker offering no ApiVersions range at all is asked at v0
    assert retry_version(answer(ErrorCode.UNSUPPORTED_VERSION), API_VERSIONS_VERSION) == 0


def test_accepted_or_otherwise_refused_answers_are_final() -> None:
    accepted = answer(ErrorCode.NONE, (API_VERSIONS_KEY, 0, 4), (3, 1, 12))
    assert retry_version(accepted, API_VERSIONS_VERSION) is None
    assert peer_versions(accepted) == {API_VERSIONS_KEY: (0, 4), 3: (1, 12)}
    # a broker that claims our version yet refuses it: asking again would loop
    confused = answer(ErrorCode.UNSUPPORTED_VERSION, (API_VERSIONS_KEY, 0, 3))
    assert retry_version(confused, API_VERSIONS_VERSION) is None
    with pytest.raises(ProtocolError, match="UNSUPPORTED_VERSION"):
        peer_versions(confused)
    with pytest.raises(ProtocolError, match="CLUSTER_AUTHORIZATION_FAILED"):
        peer_versions(answer(ErrorCode.CLUSTER_AUTHORIZATION_FAILED))


def test_only_apiversions_falls_back_to_v0() -> None:
    metadata = frame(MetadataResponse(controller_id=1), 1)  # v1 body, read as v12
    with pytest.raises(ProtocolError):
        decode_response_or_v0(3, 12, metadata)
    with pytest.raises(ProtocolError):
        decode_response_or_v0(API_VERSIONS_KEY, 0, b"\x00\x00\x00\x07\x00")


@given(
    st.none() | st.tuples(st.integers(0, 20), st.integers(0, 20)),
    st.integers(0, 20),
    st.integers(0, 20),
)
def test_the_common_version_is_the_highest_in_both_ranges(
    theirs: tuple[int, int] | None, low: int, high: int
) -> None:
    ours = set(range(low, high + 1))
    both = ours & (set() if theirs is None else set(range(theirs[0], theirs[1] + 1)))
    assert common_version(theirs, low, high) == (max(both) if both else None)
