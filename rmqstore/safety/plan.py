"""What every modifying operation's plan is: its planned actions, a summary, details, and one JSON model.

A plan is decided before anything is written and carried out exactly by the operation's
``apply_<op>``. Its JSON (``to_json``/``from_json``) is what a journal keeps and what ``--format
json`` shows of it; for the plain dataclasses it comes from :class:`JsonModel`, the one mapping
between dataclass fields and JSON keys.
"""

from __future__ import annotations

import base64
import functools
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import fields
from pathlib import Path
from typing import Any, ClassVar, Protocol, Self, runtime_checkable

from rmqstore.safety.actions import PlannedAction

_Codec = tuple[Callable[[Any], Any], Callable[[Any], Any]]
_Key = tuple[str, str, Callable[[Any], Any], Callable[[Any], Any] | None]  # attr, key, to JSON, from JSON


@runtime_checkable
class Plan(Protocol):
    """The plan of a modifying operation (``operation`` is the name its actions and journal carry)."""

    operation: ClassVar[str]

    def planned_actions(self) -> tuple[PlannedAction, ...]: ...

    def summary(self) -> dict[str, Any]: ...

    def details(self) -> dict[str, list[dict[str, Any]]]: ...

    def to_json(self) -> dict[str, Any]: ...


def camel(attr: str) -> str:
    head, *rest = attr.split("_")
    return head + "".join(w.capitalize() for w in rest)


def _same(v: Any) -> Any:
    return v


def _optional(codec: _Codec) -> _Codec:
    to, back = codec
    return (lambda v: None if v is None else to(v)), (lambda v: None if v is None else back(v))


def _sequence(item: _Codec, make: Callable[[Any], Any]) -> _Codec:
    to, back = item
    return (lambda v: [to(x) for x in v]), (lambda v: make(back(x) for x in v))


def _fixed_tuple(items: list[_Codec]) -> _Codec:
    return (
        lambda v: [c[0](x) for c, x in zip(items, v, strict=True)],
        lambda v: tuple(c[1](x) for c, x in zip(items, v, strict=True)),
    )


def _codec(hint: Any) -> _Codec:
    """How a value of type ``hint`` becomes JSON and back: nested models (anything with ``from_json``),
    paths, bytes (base64), sequences and optionals; everything else is JSON already."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (types.UnionType, typing.Union):
        inner = [a for a in args if a is not type(None)]
        return _optional(_codec(inner[0])) if len(inner) == 1 else (_same, _same)
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return _sequence(_codec(args[0]), tuple)
        return _fixed_tuple([_codec(a) for a in args])
    if origin is list:
        return _sequence(_codec(args[0]), list)
    if isinstance(hint, type):
        if hasattr(hint, "from_json"):
            return (lambda v: v.to_json()), hint.from_json
        if issubclass(hint, Path):
            return str, Path
        if hint is bytes:
            return (lambda v: base64.b64encode(v).decode("ascii")), base64.b64decode
    return _same, _same


@functools.cache
def _keys(cls: type, spec: str | None = None) -> tuple[tuple[_Key, ...], frozenset[str]]:
    """The class's JSON keys in output order (``spec``, else its ``json_keys``), and the attributes its
    constructor takes."""
    hints = typing.get_type_hints(cls)
    init = frozenset(f.name for f in fields(cls) if f.init)
    spec = spec if spec is not None else cls.json_keys  # type: ignore[attr-defined]
    items = spec.split() if spec else [f.name for f in fields(cls)]
    codecs: Mapping[str, _Codec] = cls.json_codecs  # type: ignore[attr-defined]
    out = []
    for item in items:
        attr, _, key = item.partition("=")
        to, back = codecs.get(attr) or (_codec(hints[attr]) if attr in hints else (_same, None))
        out.append((attr, key or camel(attr), to, back if attr in init else None))
    return tuple(out), init


class JsonModel:
    """``to_json``/``from_json`` of a dataclass from its fields, for plans and the rows they hold.

    ``json_keys``: ``"attr attr=key ..."`` in output order (default: every field, its name in
    camelCase); a property named there is written and not read back. ``json_codecs``: an
    attribute's own (to JSON, from JSON) pair, for values the field's type does not say how to map.
    """

    __slots__ = ()
    json_keys: ClassVar[str] = ""
    json_codecs: ClassVar[Mapping[str, _Codec]] = {}

    def to_json(self) -> dict[str, Any]:
        return self.json_view()

    def json_view(self, spec: str | None = None) -> dict[str, Any]:
        """The JSON of the attributes ``spec`` names (``"attr attr=key ..."``; default: ``json_keys``)."""
        return {key: to(getattr(self, attr)) for attr, key, to, _ in _keys(type(self), spec)[0]}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Self:
        """The value from its JSON; a missing key takes the field's default."""
        keys, _ = _keys(cls)
        return cls(**{attr: back(d[key]) for attr, key, _, back in keys if back is not None and key in d})
