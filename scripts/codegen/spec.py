"""Kafka's JSON message specs, loaded into a small model the generator and tests share.

Sources (vendored under ``specs/``, Apache-2.0, see its README): ``messages/`` from Kafka trunk
(2024-10) and ``messages-4.3-subset/`` from Kafka 4.3.  Where both define a message, the 4.3 file
is a strict superset for every version both know (checked in :func:`_merge`), so we take the 4.3
fields and the union of the version ranges: trunk's older versions stay decodable (Produce v0-2
must be answerable), 4.3's newer versions are added.  ``kafka4_min_version`` keeps the 4.x
baseline (KIP-896) for whoever decides what to advertise.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

SPEC_DIR = Path(__file__).resolve().parent / "specs"
INF = 1 << 15  # "N+" ranges end here; versions are int16

PRIMITIVES = {
    "bool",
    "int8",
    "int16",
    "uint16",
    "int32",
    "uint32",
    "int64",
    "float64",
    "string",
    "bytes",
    "records",
    "uuid",
}


@dataclass(frozen=True)
class Versions:
    lo: int
    hi: int  # inclusive; INF for "N+"

    @classmethod
    def parse(cls, text: str | None) -> Versions:
        if text is None or text == "none":
            return cls(1, 0)  # empty
        text = text.strip()
        if text.endswith("+"):
            return cls(int(text[:-1]), INF)
        if "-" in text:
            lo, hi = text.split("-")
            return cls(int(lo), int(hi))
        return cls(int(text), int(text))

    def __contains__(self, v: object) -> bool:
        return isinstance(v, int) and self.lo <= v <= self.hi

    @property
    def empty(self) -> bool:
        return self.lo > self.hi


@dataclass
class Field:
    name: str  # spec name, CamelCase
    type: str  # e.g. "int32", "[]string", "[]TopicData", "Cursor"
    versions: Versions
    nullable: Versions
    tagged: Versions
    tag: int | None
    default: str | None
    entity_type: str | None
    flexible_override: Versions | None  # only RequestHeader.ClientId ("none")
    ignorable: bool
    zero_copy: bool
    about: str
    fields: list[Field] | None = None  # inline struct definition

    @property
    def is_array(self) -> bool:
        return self.type.startswith("[]")

    @property
    def elem(self) -> str:
        return self.type[2:] if self.is_array else self.type

    @property
    def is_struct(self) -> bool:
        return self.elem not in PRIMITIVES


@dataclass
class Struct:
    name: str
    fields: list[Field]
    versions: Versions  # where the struct can appear (common structs declare it)


@dataclass
class Message:
    name: str  # e.g. ProduceRequest
    kind: str  # request | response | header | data | metadata
    api_key: int | None
    valid: Versions
    flexible: Versions
    listeners: tuple[str, ...]
    latest_version_unstable: bool
    kafka4_min_version: int | None
    fields: list[Field]
    structs: dict[str, Struct] = field(default_factory=dict)  # every named struct, by name
    source: str = ""

    @property
    def versions(self) -> range:
        return range(self.valid.lo, self.valid.hi + 1)


def _load_json(path: Path) -> dict[str, object]:
    data = json.loads(re.sub(r"//.*", "", path.read_text()))
    assert isinstance(data, dict)
    return data


def _parse_field(raw: dict[str, object]) -> Field:
    flex = raw.get("flexibleVersions")
    sub = raw.get("fields")
    default = raw.get("default")
    return Field(
        name=str(raw["name"]),
        type=str(raw["type"]),
        # Three TransactionLogValue fields omit "versions"; Kafka treats them as tagged-only.
        versions=Versions.parse(str(raw.get("versions", raw.get("taggedVersions", "none")))),
        nullable=Versions.parse(raw.get("nullableVersions")),  # type: ignore[arg-type]
        tagged=Versions.parse(raw.get("taggedVersions")),  # type: ignore[arg-type]
        tag=int(raw["tag"]) if "tag" in raw else None,  # type: ignore[call-overload]
        default=None if default is None else str(default),
        entity_type=raw.get("entityType"),  # type: ignore[arg-type]
        flexible_override=Versions.parse(str(flex)) if flex is not None else None,
        ignorable=bool(raw.get("ignorable", False)),
        zero_copy=bool(raw.get("zeroCopy", False)),
        about=str(raw.get("about", "")),
        fields=[_parse_field(f) for f in sub] if isinstance(sub, list) else None,
    )


def _collect_structs(fields: list[Field], versions: Versions, out: dict[str, Struct]) -> None:
    for f in fields:
        if f.fields is not None:
            name = f.elem
            assert name not in out or out[name].fields is f.fields, f"duplicate struct {name}"
            out[name] = Struct(name, f.fields, f.versions)
            _collect_structs(f.fields, f.versions, out)


def _parse_message(path: Path) -> Message:
    raw = _load_json(path)
    listeners = raw.get("listeners", [])
    assert isinstance(listeners, list)
    fields = [_parse_field(f) for f in raw["fields"]]  # type: ignore[attr-defined]
    msg = Message(
        name=str(raw["name"]),
        kind=str(raw["type"]),
        api_key=int(raw["apiKey"]) if "apiKey" in raw else None,  # type: ignore[call-overload]
        valid=Versions.parse(str(raw["validVersions"])),
        flexible=Versions.parse(str(raw["flexibleVersions"])),
        listeners=tuple(str(x) for x in listeners),
        latest_version_unstable=bool(raw.get("latestVersionUnstable", False)),
        kafka4_min_version=None,
        fields=fields,
        source=f"{path.parent.name}/{path.name}",
    )
    for common in raw.get("commonStructs", []):  # type: ignore[attr-defined]
        cfields = [_parse_field(f) for f in common["fields"]]
        msg.structs[common["name"]] = Struct(
            common["name"], cfields, Versions.parse(common.get("versions", "0+"))
        )
        _collect_structs(cfields, msg.valid, msg.structs)
    _collect_structs(fields, msg.valid, msg.structs)
    return msg


def _flat(fields: list[Field], prefix: str = "") -> dict[str, Field]:
    out: dict[str, Field] = {}
    for f in fields:
        out[prefix + f.name] = f
        if f.fields is not None:
            out.update(_flat(f.fields, prefix + f.name + "/"))
    return out


def _merge(trunk: Message, new: Message) -> Message:
    """4.3 fields, union of versions; refuse if 4.3 changed any version trunk already had."""
    old_fields, new_fields = _flat(trunk.fields), _flat(new.fields)
    for path, f in old_fields.items():
        g = new_fields.get(path)
        assert g is not None, f"{new.name}: 4.3 dropped {path}"
        assert (f.type, f.tag, f.nullable.lo) == (g.type, g.tag, g.nullable.lo), path
        # Same wire layout for every version both define.
        for v in range(max(trunk.valid.lo, new.valid.lo), trunk.valid.hi + 1):
            assert (v in f.versions) == (v in g.versions), f"{new.name} {path} v{v}"
    assert trunk.flexible == new.flexible, new.name
    new.kafka4_min_version = new.valid.lo
    new.valid = Versions(min(trunk.valid.lo, new.valid.lo), new.valid.hi)
    return new


def load_all() -> dict[str, list[Message]]:
    """Every spec, grouped by output package: messages, metadata, coordinator."""
    trunk = {p.stem: _parse_message(p) for p in sorted((SPEC_DIR / "messages").glob("*.json"))}
    kafka43 = {
        p.stem: _parse_message(p) for p in sorted((SPEC_DIR / "messages-4.3-subset").glob("*.json"))
    }
    messages = dict(trunk)
    for name, msg in kafka43.items():
        messages[name] = _merge(trunk[name], msg) if name in trunk else msg
    # 4.3 renamed api key 74 (ListClientMetricsResources -> ListConfigResources, KIP-1142).
    taken = {(m.api_key, m.kind) for m in kafka43.values() if m.api_key is not None}
    messages = {
        n: m
        for n, m in messages.items()
        if n in kafka43 or m.api_key is None or (m.api_key, m.kind) not in taken
    }
    metadata = [
        _parse_message(p)
        for d in ("metadata", "raft")
        for p in sorted((SPEC_DIR / d).glob("*.json"))
    ]
    coordinator = [
        _parse_message(p)
        for d in ("group-coordinator", "transaction-coordinator")
        for p in sorted((SPEC_DIR / d).glob("*.json"))
    ]
    return {
        "messages": sorted(messages.values(), key=lambda m: m.name),
        "metadata": metadata,
        "coordinator": coordinator,
    }


def snake(name: str) -> str:
    """TopicId -> topic_id, ISRNodes -> isr_nodes, IPv4 -> i_pv4 is avoided by the regexes."""
    s = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", name)
    s = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", s)
    return s.lower()
