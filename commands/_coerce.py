"""Plain parameter values (str, int, float, Path, choices and lists of them) converted without pydantic.

Typer builds a pydantic ``TypeAdapter`` for every parameter it converts; importing pydantic alone
costs more than the rest of a one-shot ``query`` or ``info`` call. Every parameter this command line
declares has a plain type, so it is converted here with typer's own rules (choices, path checks,
``min``/``max``) and the same messages; anything else still goes to typer's pydantic path.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any, get_args, get_origin


def _number(value: Any, kind: type, info: Any) -> Any:
    if isinstance(value, kind) and not isinstance(value, bool):
        number = value
    else:
        try:
            number = kind(str(value).strip())
        except ValueError:
            what = "a valid integer, unable to parse string as an integer" if kind is int else "a valid number"
            raise ValueError(f"Input should be {what}") from None
    if info.min is not None and number < info.min:
        raise ValueError(f"Input should be greater than or equal to {info.min}")
    if info.max is not None and number > info.max:
        raise ValueError(f"Input should be less than or equal to {info.max}")
    return number


_TRUE = frozenset({"1", "true", "t", "yes", "y", "on"})
_FALSE = frozenset({"", "0", "false", "f", "no", "n", "off"})


def _flag(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in _TRUE or text in _FALSE:
        return text in _TRUE
    raise ValueError("Input should be a valid boolean, unable to interpret input")


def _leaf_kind(annotation: Any, info: Any) -> str | None:
    """Which plain conversion serves ``annotation``, or None to leave it to typer."""
    if info.parser is not None or getattr(info, "click_type", None) is not None:
        return None
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        return "choice"
    if annotation is bool:
        return "bool"
    if annotation is str and not (info.allow_dash or info.path_type or info.resolve_path):
        return "str"
    if annotation in (int, float) and not info.clamp:
        return "number"
    if annotation is Path and info.path_type in (None, Path):
        return "path"
    return None


def install() -> None:
    """Convert plain parameters without pydantic (falls back to typer's own path if its internals differ)."""
    try:
        from typer import _coercion, _param_types, core
        from typer._click.exceptions import BadParameter
    except ImportError:
        return
    base = getattr(_coercion, "RuntimeParam", None)
    param_cls = getattr(core, "_TyperParameter", None)
    if base is None or param_cls is None or getattr(param_cls, "_rmqstore_plain", False):
        return

    @dataclass(frozen=True)
    class PlainParam(base):  # type: ignore[misc, valid-type]
        kind: str = "str"
        many: bool = False

        def _leaf(self, value: Any, param: Any, ctx: Any) -> Any:
            info = self.parameter_info
            leaf = get_args(self.annotation)[0] if self.many else self.annotation
            if self.kind == "str":
                return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
            if self.kind == "bool":
                return _flag(value)
            if self.kind == "number":
                return _number(value, leaf, info)
            if self.kind == "choice":
                return _param_types.coerce_cli_choice(
                    value, choices=list(leaf), case_sensitive=info.case_sensitive, ctx=ctx
                )
            path = value if isinstance(value, Path) else Path(value)
            return _param_types.coerce_cli_path(path, info, path_type=Path, param=param, ctx=ctx)

        def _coerce_value(self, value: Any, param: Any, ctx: Any) -> Any:
            try:
                if self.many:
                    items = value if isinstance(value, (list, tuple)) else [value]
                    return [self._leaf(v, param, ctx) for v in items]
                return self._leaf(value, param, ctx)
            except ValueError as e:
                raise BadParameter(str(e), ctx=ctx, param=param) from None

    def plain_param(descriptor: Any) -> Any | None:
        annotation, info = descriptor.annotation, descriptor.parameter_info
        if descriptor.file_annotation is not None:
            return None
        many = get_origin(annotation) is list
        kind = _leaf_kind(get_args(annotation)[0] if many else annotation, info)
        if kind is None:
            return None
        return PlainParam(parameter_info=info, annotation=annotation, kind=kind, many=many)

    typer_builds = param_cls.get_runtime_param

    def get_runtime_param(self: Any) -> Any:
        if getattr(self, "_runtime_param", None) is None:
            self._runtime_param = plain_param(self.type_descriptor)
        return self._runtime_param or typer_builds(self)

    param_cls.get_runtime_param = get_runtime_param
    param_cls._rmqstore_plain = True
