"""Where every record of RecordBatch v2 records sections starts and ends.

Theory of operation
-------------------
A record is ``length varint | body``, so where record *i+1* starts depends on every length
before it: the one sequential part of parsing.  :func:`record_bounds` follows the chain in
rounds, for all sections at once (:func:`_runs`): it decodes the size of the record in hand,
guesses that the records after it have that size too, and checks every guess by comparing the
bytes there with the length varint that size implies (canonical, as clients write it; a record
whose is not just ends its run).  A section's guesses are right up to its first record of
another size, where its next round starts.  Fixed-size values make one or two runs a batch
(offset and timestamp deltas widen at 64); keys such as ``k0``, ``k1``... a few more.

Sections whose runs are short (record sizes that vary record by record) go to a Python loop
that walks lengths of one or two bytes without checking them (:func:`_walk`: about 0.2 us a
record, the floor of a pure Python decoder), speculating again whenever two records in a row
have the same size.  The walk's result is then checked with numpy: each record must end
where the next starts and the last where its section does.  A section that fails is walked
again strictly (:func:`_strict_starts`), which handles lengths of 3+ bytes and raises
:class:`CorruptRecordError` with the reason if the section really is corrupt.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kafka_protocol.exceptions import CorruptRecordError
from spark_source._arrow_layout import I64, U8, Bools, py_varint, unchecked_varints

MIN_RECORD_BYTES = 7  # length, attributes, timestamp, offset, key, value, header count
MAX_RUN_ROUNDS = 8  # then sections whose runs still go on are walked
SPECULATE_MIN = 32  # records in a run worth a numpy round
FIRST_WALK_RECORDS = 64  # a whole small batch in one call
MAX_WALK_RECORDS = 8192
_TABLE_SIZES = 1 << 16  # records under 64 KiB: their length prefixes are looked up


def record_bounds(buf: memoryview, data: U8, sections: I64, counts: I64) -> tuple[I64, I64]:
    """Where the body of every record starts and where it ends, for every section
    ``buf[sections[i, 0]:sections[i, 1]]`` (``data`` is ``buf`` as numpy), which
    ``counts[i]`` records must fill exactly."""
    room = sections[:, 1] - sections[:, 0]
    if (counts < 0).any() or (counts > room // MIN_RECORD_BYTES).any():
        raise CorruptRecordError("a batch claims more records than its bytes can hold")
    body = np.zeros(int(counts.sum()), dtype=np.int64)
    end = np.zeros_like(body)
    live = np.flatnonzero(counts > 0)
    first = (np.cumsum(counts) - counts)[live]  # the index of each section's next record
    pos, stop, left = sections[live, 0], sections[live, 1], counts[live]
    walk = []
    for round_ in range(MAX_RUN_ROUNDS):
        r = _runs(data, pos, stop, left)
        seg, within, at = r.seg, r.within, r.at
        right = within < r.run[seg]
        if not right.all():
            seg, within, at = seg[right], within[right], at[right]
        record = first[seg] + within
        body[record], end[record] = at + r.width[seg], at + r.size[seg]
        first, pos, left = first + r.run, pos + r.run * r.size, left - r.run
        if ((left == 0) & (pos != stop)).any():
            raise CorruptRecordError("bytes after the last record of a batch")
        short = (left > 0) & ((r.run < SPECULATE_MIN) | (round_ == MAX_RUN_ROUNDS - 1))
        walk.append((stop[short], first[short], left[short], pos[short]))
        more = (left > 0) & ~short
        if not more.any():
            break
        first, pos, stop, left = first[more], pos[more], stop[more], left[more]
    todo = [np.concatenate(column) for column in zip(*walk, strict=True)]
    if len(todo[0]):
        _walk_sections(buf, data, todo, body, end)
    return body, end


# --- runs of one size, for many sections at once ---------------------------------------------


@dataclass(frozen=True, slots=True)
class _Runs:
    """From each position in hand, ``run[k]`` records of ``size[k]`` bytes (whose lengths take
    ``width[k]`` bytes).  Every guess made on the way: from which position (``seg``), the how
    many-th (``within``) and where (``at``); the first ``run[seg]`` of each are right."""

    run: I64
    size: I64
    width: I64
    seg: I64
    within: I64
    at: I64


def _runs(data: U8, pos: I64, stop: I64, left: I64) -> _Runs:
    """For the records from each ``pos`` (up to ``stop``, ``left`` of them at most): how many
    in a row have the size of the first.  0 where the first record's length is unusable
    (malformed, or past ``stop``): the walk will say why."""
    length, after, ok = unchecked_varints(data, pos, stop)
    size = after - pos + length
    usable = ok & (length >= 0) & (size <= stop - pos)
    size[~usable] = 1
    cap = np.where(usable, np.minimum(left, (stop - pos) // size), 0)
    packed, width = _length_prefixes(size)
    seg = np.repeat(np.arange(len(cap)), cap)
    within = np.arange(len(seg)) - (np.cumsum(cap) - cap)[seg]
    at = pos[seg] + size[seg] * within
    run = cap.copy()
    wrong = np.flatnonzero(~_prefixes_match(data, at, packed[seg], width[seg]))
    if len(wrong):  # each run ends at its first wrong guess: where seg[wrong] changes
        firsts = wrong[np.diff(seg[wrong], prepend=-1) != 0]
        run[seg[firsts]] = within[firsts]
    return _Runs(run, size, width, seg, within, at)


def _prefixes_match(data: U8, at: I64, packed: I64, width: I64) -> Bools:
    """Whether ``data`` holds the ``width[i]`` bytes ``packed[i]`` (little-endian) at ``at[i]``."""
    got = np.zeros(len(at), dtype=np.int64)
    last = len(data) - 1
    for j in range(int(width.max(initial=0))):
        got |= data[np.minimum(at + j, last)].astype(np.int64) << 8 * j
    match: Bools = (width > 0) & ((got & ((1 << 8 * width) - 1)) == packed)
    return match


def _varint_widths(raw: I64) -> I64:
    """How many bytes the varints of the non-negative ``raw`` take (1 to 5 below 2**35)."""
    return np.searchsorted(_VARINT_LIMITS, raw, side="right") + 1


def _compute_length_prefixes(sizes: I64) -> tuple[I64, I64]:
    width = _varint_widths(2 * np.maximum(sizes - 1, 0))
    width -= _varint_widths(2 * np.maximum(sizes - width, 0)) < width  # at a width boundary
    raw = 2 * (sizes - width)  # the zigzag of a non-negative length
    width[(raw < 0) | (_varint_widths(np.maximum(raw, 0)) != width)] = 0
    packed = np.zeros(len(sizes), dtype=np.int64)
    for j in range(int(width.max(initial=0))):
        byte = (raw >> 7 * j) & 0x7F | np.where(j < width - 1, 0x80, 0)
        packed |= np.where(j < width, byte, 0) << 8 * j
    return packed, width


def _length_prefixes(sizes: I64) -> tuple[I64, I64]:
    """The canonical length varint of a record of each of ``sizes`` bytes in all: (its bytes
    packed little-endian, its width); width 0 where no length fits (a record of 65 bytes, say:
    a length of 64 takes two bytes, and 63 one)."""
    if sizes.max(initial=0) < _TABLE_SIZES:
        return _PACKED[sizes], _WIDTH[sizes]
    return _compute_length_prefixes(sizes)


_VARINT_LIMITS = np.array([1 << 7 * w for w in range(1, 5)], dtype=np.int64)
_PACKED, _WIDTH = _compute_length_prefixes(np.arange(_TABLE_SIZES, dtype=np.int64))


# --- the Python walk ------------------------------------------------------------------------


def _walk_sections(buf: memoryview, data: U8, todo: list[I64], body: I64, end: I64) -> None:
    """For each ``(stop, first, count, start)`` in ``todo``: ``count`` records from record
    ``first``, which starts at ``start``, fill the section up to ``stop``.  Walk them, check
    the walk with numpy, walk strictly where it is wrong; fill in ``body`` and ``end``."""
    stop, first, count, start = todo
    walked: list[int] = []
    for s, e, n in zip(start.tolist(), stop.tolist(), count.tolist(), strict=True):
        _section_starts(buf, data, s, e, n, walked)
    last = np.cumsum(count) - 1  # each section's last record, in the walked arrays
    at = np.array(walked, dtype=np.int64)
    limit = np.repeat(stop, count)
    length, body_at, ok = unchecked_varints(data, at, limit)
    following = np.roll(at, -1)
    following[last] = stop
    wrong = ~ok | (length < 0) | (body_at + length != following)
    for k in np.unique(np.searchsorted(last, np.flatnonzero(wrong))).tolist():
        mine = slice(int(last[k]) + 1 - int(count[k]), int(last[k]) + 1)
        at[mine] = _strict_starts(buf, int(start[k]), int(stop[k]), int(count[k]))
        length[mine], body_at[mine], _ = unchecked_varints(data, at[mine], limit[mine])
    record = np.repeat(first - (last + 1 - count), count) + np.arange(len(at))
    body[record], end[record] = body_at, body_at + length


def _section_starts(
    buf: memoryview, data: U8, start: int, end: int, count: int, out: list[int]
) -> None:
    """Append the starts of the ``count`` records that should fill ``buf[start:end]``: walked,
    but once two records in a row have the same size, the records ahead are guessed to have
    it too (:func:`_runs`).  Unchecked: the caller checks."""
    first, pos, stretch = len(out), start, FIRST_WALK_RECORDS
    try:
        while (done := len(out) - first) < count:
            n = min(count - done, stretch)
            pos = _walk(buf, pos, n, out)
            stretch = min(2 * stretch, MAX_WALK_RECORDS)
            left = count - done - n
            if n < 2 or left < SPECULATE_MIN or 2 * out[-1] != out[-2] + pos:
                continue
            r = _runs(data, np.array([pos]), np.array([end]), np.array([left]))
            run, size = int(r.run[0]), int(r.size[0])
            out.extend(range(pos, pos + run * size, size))
            pos += run * size
            if run >= SPECULATE_MIN:
                stretch = FIRST_WALK_RECORDS
    except IndexError:  # walked off the buffer: wrong, as the caller will find
        out.extend([start] * (count - (len(out) - first)))


def _walk(buf: memoryview, pos: int, count: int, out: list[int]) -> int:
    """Append the starts of ``count`` records from ``pos``; return the position after them.

    The per-record cost where record sizes vary, so it trusts lengths of one or two varint
    bytes (records under 8 KiB) and checks nothing: its caller does, with numpy."""
    append = out.append
    for _ in range(count):
        append(pos)
        raw = buf[pos]
        if raw < 0x80:
            pos += 1 + (raw >> 1)
        else:
            pos += 2 + (((raw & 0x7F) | (buf[pos + 1] << 7)) >> 1)
    return pos


def _strict_starts(buf: memoryview, start: int, end: int, count: int) -> list[int]:
    """The starts of ``count`` records filling ``buf[start:end]``, every length checked: for a
    section the fast walk got wrong (records of 8 KiB and more, or corrupt)."""
    out, pos = [], start
    for _ in range(count):
        out.append(pos)
        length, body = py_varint(buf, pos, end)
        if length < 0 or length > end - body:
            raise CorruptRecordError(f"record of {length} bytes overruns the batch")
        pos = body + length
    if pos != end:
        raise CorruptRecordError(f"{end - pos} bytes after the last record of the batch")
    return out
