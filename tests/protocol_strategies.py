"""Hypothesis strategies derived from Kafka's JSON specs (not from the generated code).

For a message and a version, every field the spec puts on the wire at that version gets a value
drawn from its type, nullability and array-ness; fields absent at that version keep their
defaults.  The generated classes are only used as constructors.
"""

from __future__ import annotations

import importlib
import keyword
import sys
import uuid
from functools import cache
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts" / "codegen"))

import spec

PACKAGES = {"messages": "kafka_protocol.messages", "metadata": "kafka_protocol.metadata"}
PACKAGES["coordinator"] = "kafka_protocol.coordinator"

_INTS = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "uint16": (0, 2**16 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "uint32": (0, 2**32 - 1),
    "int64": (-(2**63), 2**63 - 1),
}


@cache
def all_specs() -> list[tuple[str, spec.Message]]:
    return [(pkg, m) for pkg, msgs in spec.load_all().items() for m in msgs]


def message_class(package: str, msg: spec.Message) -> Any:
    return getattr(importlib.import_module(PACKAGES[package]), msg.name)


def cases() -> list[tuple[str, str, int]]:
    """(package, message name, version) for every version of every spec."""
    return [(pkg, m.name, v) for pkg, m in all_specs() for v in m.versions]


def _primitive(t: str) -> st.SearchStrategy[Any]:
    if t in _INTS:
        lo, hi = _INTS[t]
        return st.integers(lo, hi)
    if t == "bool":
        return st.booleans()
    if t == "float64":
        return st.floats(allow_nan=False)
    if t == "string":
        return st.text(max_size=12)
    if t in ("bytes", "records"):
        return st.binary(max_size=24)
    if t == "uuid":
        return st.uuids(version=4) | st.just(uuid.UUID(int=0))
    raise AssertionError(t)


def struct_strategy(cls: Any, msg: spec.Message, fields: list[spec.Field], v: int) -> Any:
    flexible = v in msg.flexible
    kwargs: dict[str, st.SearchStrategy[Any]] = {}
    for f in fields:
        on_wire = v in f.versions and (v not in f.tagged or flexible)
        if not on_wire:
            continue
        if f.is_struct:
            sub_fields = msg.structs[f.elem].fields
            elem = struct_strategy(getattr(cls_root(cls), f.elem), msg, sub_fields, v)
        else:
            elem = _primitive(f.elem)
        value = st.lists(elem, max_size=3) if f.is_array else elem
        if v in f.nullable:
            value = st.none() | value
        name = spec.snake(f.name)
        kwargs[name + "_" if keyword.iskeyword(name) else name] = value
    return st.builds(cls, **kwargs)


def cls_root(cls: Any) -> Any:
    """Nested struct classes live on the message class (``ProduceRequest.TopicProduceData``)."""
    qualname = cls.__qualname__.split(".")[0]
    return getattr(sys.modules[cls.__module__], qualname)


@cache
def message_strategy(package: str, name: str, version: int) -> st.SearchStrategy[Any]:
    msg = next(m for p, m in all_specs() if p == package and m.name == name)
    return struct_strategy(message_class(package, msg), msg, msg.fields, version)
