"""A controller whose Raft journal breaks an invariant stops itself: exit status 70, one line.

The damage is what a disk that lies leaves behind: in one follower's journal, the term of an
entry it has committed no longer matches the entry the rest of the quorum committed there. After
a restart of the whole quorum the new leader sends its own entry for that index; Raft says a
committed entry is never replaced, so the follower crash-stops (``broker.fatal``) rather than
truncate committed metadata and serve on. The other two controllers keep the quorum.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path

import pytest
from pysyncobj.pickle import loads as pysyncobj_loads  # type: ignore[import-untyped]

from broker.fatal import FATAL_EXIT_STATUS
from integration.cluster_process import LocalCluster, ServerProcess, wait_for
from kraft.node.quorum_member import RAFT_SUBDIR
from kraft.quorum.raft import JOURNAL_FILE_NAME

pytestmark = pytest.mark.integration

# pysyncobj's FileJournal: a 40-byte header whose last 4 bytes are the end of the last record,
# then records of [size u32][raft index u64][raft term u64][command][size u32], little-endian.
_RECORDS_END_AT = 36
_FIRST_RECORD = 40


def journal_path(node: ServerProcess) -> Path:
    return Path(node.properties["metadata.log.dir"]) / RAFT_SUBDIR / JOURNAL_FILE_NAME


def journal_entries(path: Path) -> list[tuple[int, int, int]]:
    """(file position of the term, raft index, raft term) of every entry."""
    data = path.read_bytes()
    (end,) = struct.unpack_from("<I", data, _RECORDS_END_AT)
    entries, position = [], _FIRST_RECORD
    while position < end:
        (size,) = struct.unpack_from("<I", data, position)
        index, term = struct.unpack_from("<QQ", data, position + 4)
        entries.append((position + 12, index, term))
        position += size + 8
    return entries


def commit_index(path: Path) -> int:
    """What the journal's ``.meta`` file says this node has committed (stored every second)."""
    meta = pysyncobj_loads(Path(f"{path}.meta").read_bytes())
    return int(meta.get("raftCommitIndex", 1))


def rewrite_term(path: Path, position: int, term: int) -> None:
    with path.open("r+b") as journal:
        journal.seek(position)
        journal.write(struct.pack("<Q", term))


@pytest.fixture
def quorum(tmp_path: Path) -> Iterator[LocalCluster]:
    cluster = LocalCluster.create(tmp_path, n_controllers=3, n_brokers=0).start()
    try:
        yield cluster
    finally:
        cluster.kill_all()


def test_a_committed_entry_that_conflicts_with_the_leader_stops_the_controller(
    quorum: LocalCluster,
) -> None:
    # The quorum elects a leader, which claims its epoch and bootstraps the metadata.
    leader_id = wait_for("an active controller", quorum.active_controller, 20, quorum)
    follower = next(c for i, c in quorum.controllers.items() if i != leader_id)
    path = journal_path(follower)

    def all_committed() -> bool:
        status = quorum.controllers[leader_id].get("/v1/cluster")
        metadata_written = status["metadata_offset"] >= 0
        in_sync = all(v["lag"] == 0 for v in status["controller"]["voters"])
        last = journal_entries(path)[-1][1]
        return metadata_written and in_sync and commit_index(path) >= last

    wait_for("the follower to store its commit index", all_committed, 20, quorum)

    follower.stop()  # first, so that the others add nothing it lacks
    for controller in quorum.controllers.values():
        if controller.alive():
            controller.stop()
    position, index, term = journal_entries(path)[-1]
    assert index <= commit_index(path) and term >= 1
    rewrite_term(path, position, term - 1)

    for controller in quorum.controllers.values():
        controller.launch()
    assert follower.proc is not None
    status = follower.proc.wait(timeout=30)
    log = follower.log_path.read_text()
    assert status == FATAL_EXIT_STATUS == 70, log
    (line,) = [x for x in log.splitlines() if "FATAL" in x]
    assert " CRITICAL broker.fatal FATAL invariant=raft.committed-entry-conflict " in line, line
    assert f"index={index} commit_index=" in line and f"term={term - 1} leader_term={term}" in line
    assert "Traceback" not in log.split(line, 1)[1]  # the stop is the last word

    others = [c for c in quorum.controllers.values() if c is not follower]
    for controller in others:
        controller.wait_ready()
    wait_for(
        "the other two controllers to keep the quorum",
        lambda: quorum.active_controller() in {c.node_id for c in others},
        20,
        quorum,
    )
    assert all(c.alive() for c in others)
