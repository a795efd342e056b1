"""Fixed-width on-disk structures declared once, as a table of fields.

A format module lists its fields (name, the Java / store-format.md name, a big-endian struct code)
and takes both its per-value ``struct.Struct`` and its numpy dtype (for whole runs of entries)
from that one list, so the two readings cannot disagree.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

INT_MAX = 0x7FFFFFFF  # Java's Integer.MAX_VALUE: the bound of int fields and counts
_NUMPY = {"b": ">i1", "h": ">i2", "i": ">i4", "q": ">i8", "4s": ">u4", "16s": "V16"}


@dataclass(frozen=True, slots=True)
class Field:
    """One fixed-width field, named after its row in store-format.md."""

    name: str  # the attribute name in the codec's dataclass (snake case of the Java name)
    java: str  # the name store-format.md gives it
    code: str  # struct code, big-endian and signed as in Java; "addr" = a 4- or 16-byte address


def table(text: str) -> tuple[Field, ...]:
    """Fields written as a table, one a line: the attribute name, the struct code, the document's name."""
    rows = (line.split(None, 2) for line in text.strip().splitlines())
    return tuple(Field(name, java, code) for name, code, java in rows)


def struct_of(fields: tuple[Field, ...]) -> struct.Struct:
    """The big-endian struct of ``fields`` (none of them an address)."""
    return struct.Struct(">" + "".join(f.code for f in fields))


def dtype_of(fields: tuple[Field, ...], codes: tuple[str, ...] | None = None) -> np.dtype:
    """The numpy structured dtype of ``fields`` (with ``codes`` overriding their struct codes)."""
    import numpy as np  # here, so a command that never builds an array starts without numpy

    codes = codes or tuple(f.code for f in fields)
    return np.dtype([(f.name, _NUMPY[c]) for f, c in zip(fields, codes, strict=True)])


def lazy_dtypes(**tables: tuple[Field, ...]) -> Callable[[str], np.dtype]:
    """A module ``__getattr__`` giving the dtype of each named table, built on first use.

    A command that reads a few entries with ``struct`` then never imports numpy.
    """

    @cache
    def dtype(name: str) -> np.dtype:
        if name not in tables:
            raise AttributeError(name)
        return dtype_of(tables[name])

    return dtype
