"""The exactly-once sink's pure decisions: transactional ids per Spark partition, and when a
committed marker means a task's rows are already in Kafka."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from spark_source.exactly_once import (
    TaskIdentity,
    already_written,
    marker_metadata,
    transactional_id,
)

QUERY = "6f117fca-17f4-473b-9e18-14aa90c9a257"


def test_one_transactional_id_per_prefix_and_spark_partition() -> None:
    assert transactional_id("orders-eos", 3) == "orders-eos-3"
    ids = {transactional_id(p, n) for p in ("a", "b") for n in range(4)}
    assert len(ids) == 8


@given(
    marker_batch=st.integers(0, 50),
    batch=st.integers(0, 50),
    attempt=st.integers(0, 3),
    same_query=st.booleans(),
)
def test_a_batch_is_written_unless_its_query_committed_it_or_a_later_one(
    marker_batch: int, batch: int, attempt: int, same_query: bool
) -> None:
    writer = TaskIdentity(partition_id=1, attempt=0, query_id=QUERY, batch_id=marker_batch)
    marker = (marker_batch, marker_metadata(writer))
    task = TaskIdentity(1, attempt, QUERY if same_query else "another-query", batch)
    assert already_written(marker, task) == (same_query and batch <= marker_batch)


def test_no_marker_or_a_foreign_one_means_write() -> None:
    task = TaskIdentity(0, 0, QUERY, 0)
    assert not already_written(None, task)
    assert not already_written((5, ""), task)  # committed by something else
    assert not already_written((5, "not json"), task)
    assert not already_written((5, "[1, 2]"), task)
    assert already_written((0, marker_metadata(task)), task)
