"""DescribeTopicPartitions' pages (KIP-966): following ``next_cursor`` from the first page
describes every partition of the topics once, in (name, index) order, each page within its
partition limit -- as Kafka's ``getTopicMetadataForDescribeTopicResponse`` pages."""

from __future__ import annotations

import uuid

from hypothesis import given, settings
from hypothesis import strategies as st

from broker.handlers.cluster_description import describe_page
from kafka_protocol.errors import ErrorCode
from kafka_protocol.metadata import PartitionRecord, TopicRecord
from kafka_protocol.types import BrokerId
from metadata_log.delta import MetadataDelta
from metadata_log.image import ClusterImage
from metadata_log.records import MetadataRecord


def _image(partitions: dict[str, int]) -> ClusterImage:
    records: list[MetadataRecord] = []
    for name, count in partitions.items():
        topic_id = uuid.uuid4()
        records.append(TopicRecord(name=name, topic_id=topic_id))
        for index in range(count):
            records.append(
                PartitionRecord(
                    partition_id=index,
                    topic_id=topic_id,
                    replicas=[BrokerId(1), BrokerId(2)],
                    isr=[BrokerId(1)],
                    leader=BrokerId(1),
                    leader_epoch=3,
                    partition_epoch=0,
                    eligible_leader_replicas=[BrokerId(2)],
                    last_known_elr=[],
                )
            )
    return MetadataDelta(ClusterImage.EMPTY).replay_all(records).apply()


def _pages(
    image: ClusterImage, names: list[str], limit: int, listing: bool
) -> list[list[tuple[str, int]]]:
    pages: list[list[tuple[str, int]]] = []
    cursor_topic, cursor_partition = "", 0
    while True:
        wanted = [n for n in sorted(set(names)) if n >= cursor_topic]
        page = describe_page(
            image, wanted, cursor_topic, cursor_partition, limit, "PLAINTEXT", listing
        )
        pages.append([(str(t.name), p.partition_index) for t in page.topics for p in t.partitions])
        if page.next_cursor is None:
            return pages
        assert len(pages) < 10_000, "the cursor must advance"
        cursor_topic = str(page.next_cursor.topic_name)
        cursor_partition = page.next_cursor.partition_index


@settings(max_examples=60, deadline=None)
@given(
    counts=st.dictionaries(
        st.text("abcdef", min_size=1, max_size=4), st.integers(0, 7), min_size=1, max_size=6
    ),
    limit=st.integers(1, 9),
)
def test_following_the_cursor_describes_every_partition_once(
    counts: dict[str, int], limit: int
) -> None:
    image = _image(counts)
    pages = _pages(image, list(counts), limit, listing=True)
    described = [tp for page in pages for tp in page]
    assert described == [(n, i) for n in sorted(counts) for i in range(counts[n])]
    assert all(len(page) <= limit for page in pages)
    assert all(len(page) > 0 for page in pages[:-1]), "only the last page may come up empty"


def test_a_topic_cut_by_the_limit_continues_at_its_next_partition() -> None:
    image = _image({"alpha": 3, "beta": 2})
    page = describe_page(image, ["alpha", "beta"], "", 0, 2, "PLAINTEXT", listing=True)
    assert [(t.name, [p.partition_index for p in t.partitions]) for t in page.topics] == [
        ("alpha", [0, 1])
    ]
    assert page.next_cursor is not None
    assert (page.next_cursor.topic_name, page.next_cursor.partition_index) == ("alpha", 2)
    # a page that ends exactly with a topic points at the next topic's first partition
    page = describe_page(image, ["alpha", "beta"], "", 0, 3, "PLAINTEXT", listing=True)
    assert page.next_cursor is not None
    assert (page.next_cursor.topic_name, page.next_cursor.partition_index) == ("beta", 0)
    partition = page.topics[0].partitions[0]
    assert partition.leader_epoch == 3 and partition.isr_nodes == [1]
    assert partition.eligible_leader_replicas == [2] and partition.last_known_elr == []


def test_named_unknown_topics_are_errors_a_listing_skips_them() -> None:
    image = _image({"known": 1})
    names = ["bad/name", "known", "missing"]
    page = describe_page(image, sorted(names), "", 0, 10, "PLAINTEXT", listing=False)
    errors = {str(t.name): t.error_code for t in page.topics}
    assert errors == {
        "bad/name": ErrorCode.INVALID_TOPIC_EXCEPTION,
        "known": ErrorCode.NONE,
        "missing": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    }
    page = describe_page(image, sorted(names), "", 0, 10, "PLAINTEXT", listing=True)
    assert [t.name for t in page.topics] == ["known"]
