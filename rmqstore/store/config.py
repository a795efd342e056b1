"""The broker's ``config/*.json`` files, read and written byte for byte as fastjson writes them.

Format: store-format.md §11 (persist and load rules §11.1, fastjson style §11.2, the files
§11.3-§11.7, test vector §15.13) and §12 (topic defaults, perm bits).

* :func:`loads` is a tolerant parser for fastjson output: unquoted integer map keys (``{0:250}``,
  not valid JSON) become ``int`` keys, quoted keys stay ``str``, key order is kept. Bad input raises
  :class:`~rmqstore.errors.ConfigError` naming the file and line, never ``ValueError``.
* :func:`dumps` writes fastjson's pretty format (or its compact form): one TAB per level, ``"k":v``,
  a newline before every string key, none before an integer key, so integer-keyed maps come out as
  ``{0:250,1:249\\n\\t\\t}``. Dicts are written in their own order; beans are dicts sorted by key
  (:func:`bean`). A Python ``list`` is written like fastjson writes a ``Set`` or a primitive array
  (``[a,b]`` on one line, the layout §11.4/§11.7 show); a :class:`JavaList` like a ``java.util.List``
  (one item per line). :func:`loads` gives back a :class:`JavaList` for an array written that way.
* :func:`read_config` / :func:`write_config` follow the broker's load rule (main file, else
  ``.bak``) and its persist sequence, made crash-safe.
* Typed views: topics (:class:`TopicConfig`), consumer offsets, delay offsets.
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NoReturn

from rmqstore.codec.topic import TOPIC_VALIDATOR_RE, queue_name_problem, shown
from rmqstore.errors import ConfigError, InputError
from rmqstore.rules import rules_for
from rmqstore.safety.files import atomic_write, fsync_dir
from rmqstore.safety.openfile import TooDeep, open_fd, read_file

if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "PERM_INHERIT",
    "PERM_PRIORITY",
    "PERM_READ",
    "PERM_WRITE",
    "ConfigFile",
    "JavaList",
    "TopicConfig",
    "auto_create_topic",
    "bean",
    "bump_data_version",
    "dumps",
    "load_consumer_offsets",
    "load_delay_offsets",
    "load_topics",
    "loads",
    "read_config",
    "set_consumer_offset",
    "set_topic",
    "topic_to_bean",
    "write_config",
]

# §12 PermName bits.
PERM_PRIORITY = 8
PERM_READ = 4
PERM_WRITE = 2
PERM_INHERIT = 1

AUTO_CREATE_TEMPLATE = "TBW102"  # TopicValidator.AUTO_CREATE_TOPIC_KEY_TOPIC
TOPIC_GROUP_SEPARATOR = "@"  # ConsumerOffsetManager key: topic@group (§11.4)

# Written by the broker with encode(false) even though ConfigManager.persist asks for pretty format:
# every real 5.x timermetrics / transactionMetrics file is one compact line.
COMPACT_FILES = frozenset({"timermetrics", "transactionMetrics"})

_MAX_DEPTH = 200  # nesting limit of the parser; real config files nest 5 deep at most

_JAVA_LONG_MAX = 2**63 - 1
_JAVA_INT_MAX = 2**31 - 1


class JavaList(list[Any]):
    """A list fastjson writes as a ``java.util.List``: in pretty format one item per line.

    A plain ``list`` is written like a ``Set`` or a primitive array (``CollectionCodec``,
    ``int[]``), all on one line. :func:`loads` returns a ``JavaList`` for an array whose ``[`` is
    followed by a line break, so both layouts survive a read/write round trip.
    """

    __slots__ = ()


# --------------------------------------------------------------------------------------- parsing

_WS_RE = re.compile(r"[ \t\n\r\f\b]*")  # fastjson's lexer also skips \f and \b
_NUMBER_RE = re.compile(r"-?\d+(\.\d+)?([eE][+-]?\d+)?")
_INT_KEY_RE = re.compile(r"-?\d+")
_IDENT_RE = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*")
_STRING_CHUNK = {'"': re.compile(r'[^"\\]*'), "'": re.compile(r"[^'\\]*")}
_SURROGATE_RE = re.compile("[\ud800-\udfff]")
_HEX = frozenset("0123456789abcdefABCDEF")
_ESCAPES = {
    '"': '"',
    "'": "'",
    "\\": "\\",
    "/": "/",
    "b": "\b",
    "f": "\f",
    "F": "\f",
    "n": "\n",
    "r": "\r",
    "t": "\t",
    "v": "\v",
    **{str(d): chr(d) for d in range(8)},  # fastjson reads \0 .. \7 as those control characters
}
_LITERALS = (("true", True), ("false", False), ("null", None))


class _Parser:
    """Recursive-descent reader for fastjson output (strict JSON plus fastjson's extensions)."""

    def __init__(self, text: str, path: str | Path) -> None:
        self.text = text
        self.path = path
        self.n = len(text)

    def fail(self, what: str, pos: int, kind: type[ConfigError] = ConfigError) -> NoReturn:
        pos = min(pos, self.n)
        line = self.text.count("\n", 0, pos) + 1
        column = pos - (self.text.rfind("\n", 0, pos) + 1) + 1
        raise kind(f"{what} (column {column})", path=self.path, line=line)

    def skip_ws(self, pos: int) -> int:
        m = _WS_RE.match(self.text, pos)
        return m.end() if m else pos

    def document(self) -> Any:
        pos = self.skip_ws(0)
        if pos >= self.n:
            self.fail("empty document", pos)
        value, pos = self.value(pos, 0)
        pos = self.skip_ws(pos)
        if pos != self.n:
            self.fail(f"unexpected {self.text[pos]!r} after the end of the document", pos)
        return value

    def value(self, pos: int, depth: int) -> tuple[Any, int]:
        pos = self.skip_ws(pos)
        if pos >= self.n:
            self.fail("unexpected end of file", pos)
        c = self.text[pos]
        if c == "{":
            return self.obj(pos, depth + 1)
        if c == "[":
            return self.array(pos, depth + 1)
        if c in "\"'":
            return self.string(pos)
        if c == "-" or "0" <= c <= "9":
            return self.number(pos)
        for word, val in _LITERALS:
            if self.text.startswith(word, pos):
                return val, pos + len(word)
        self.fail(f"unexpected character {c!r}", pos)

    def obj(self, pos: int, depth: int) -> tuple[dict[Any, Any], int]:
        if depth > _MAX_DEPTH:
            self.fail(f"nesting deeper than {_MAX_DEPTH} levels", pos, TooDeep)
        result: dict[Any, Any] = {}
        pos = self.skip_ws(pos + 1)
        if pos < self.n and self.text[pos] == "}":
            return result, pos + 1
        while True:
            pos = self.skip_ws(pos)
            key, pos = self.key(pos)
            pos = self.skip_ws(pos)
            if pos >= self.n or self.text[pos] != ":":
                self.fail("expected ':' after a key", pos)
            result[key], pos = self.value(pos + 1, depth)
            closed, pos = self.after_item(pos, "}", "object")
            if closed:
                return result, pos

    def after_item(self, pos: int, close: str, what: str) -> tuple[bool, int]:
        """Past the ``,`` after a member or item, or past ``close``; and whether it was ``close``."""
        pos = self.skip_ws(pos)
        if pos >= self.n:
            self.fail(f"unterminated {what}", pos)
        c = self.text[pos]
        if c != close and c != ",":
            self.fail(f"expected ',' or '{close}' in an {what}, found {c!r}", pos)
        return c == close, pos + 1

    def key(self, pos: int) -> tuple[str | int, int]:
        if pos >= self.n:
            self.fail("unexpected end of file where a key was expected", pos)
        c = self.text[pos]
        if c in "\"'":
            return self.string(pos)
        m = _INT_KEY_RE.match(self.text, pos)  # fastjson writes Integer keys unquoted (§11.2)
        if m:
            return self.to_int(m.group(), pos), m.end()
        m = _IDENT_RE.match(self.text, pos)  # fastjson's AllowUnQuotedFieldNames
        if m:
            return m.group(), m.end()
        self.fail(f"expected a key, found {c!r}", pos)

    def array(self, pos: int, depth: int) -> tuple[list[Any], int]:
        if depth > _MAX_DEPTH:
            self.fail(f"nesting deeper than {_MAX_DEPTH} levels", pos, TooDeep)
        after = self.skip_ws(pos + 1)
        items: list[Any] = JavaList() if "\n" in self.text[pos + 1 : after] else []
        pos = after
        if pos < self.n and self.text[pos] == "]":
            return [], pos + 1
        while True:
            item, pos = self.value(pos, depth)
            items.append(item)
            closed, pos = self.after_item(pos, "]", "array")
            if closed:
                return items, pos

    def string(self, pos: int) -> tuple[str, int]:
        quote = self.text[pos]
        chunk_re = _STRING_CHUNK[quote]
        parts: list[str] = []
        i = pos + 1
        while True:
            m = chunk_re.match(self.text, i)
            j = m.end() if m else i
            parts.append(self.text[i:j])
            if j >= self.n:
                self.fail("unterminated string", pos)
            if self.text[j] == quote:
                s = "".join(parts)
                return (_join_surrogates(s) if _SURROGATE_RE.search(s) else s), j + 1
            esc = self.text[j + 1 : j + 2]  # self.text[j] is a backslash
            if esc and esc in _ESCAPES:
                parts.append(_ESCAPES[esc])
                i = j + 2
            elif esc in ("u", "x"):
                width = 4 if esc == "u" else 2
                digits = self.text[j + 2 : j + 2 + width]
                if len(digits) != width or not _HEX.issuperset(digits):
                    self.fail(f"bad \\{esc} escape in a string", j)
                parts.append(chr(int(digits, 16)))
                i = j + 2 + width
            elif not esc:
                self.fail("unterminated string", pos)
            else:
                self.fail(f"bad escape \\{esc} in a string", j)

    def number(self, pos: int) -> tuple[int | float, int]:
        m = _NUMBER_RE.match(self.text, pos)
        if not m:
            self.fail("bad number", pos)
        text = m.group()
        if m.group(1) is None and m.group(2) is None:
            return self.to_int(text, pos), m.end()
        value = float(text)
        if not math.isfinite(value):
            self.fail("number out of range", pos)
        return value, m.end()

    def to_int(self, text: str, pos: int) -> int:
        try:
            return int(text)
        except ValueError:  # more digits than int() converts (sys.get_int_max_str_digits)
            self.fail("number too long", pos)


def _join_surrogates(s: str) -> str:
    """Combine ``\\uD83D\\uDE00``-style escaped pairs into one code point; lone halves stay."""
    try:
        return s.encode("utf-16-le", "surrogatepass").decode("utf-16-le")
    except UnicodeDecodeError:
        return s


def loads(text: str | bytes, *, path: str | Path = "<string>") -> Any:
    """Parse fastjson output; unquoted integer keys become ``int``, quoted keys stay ``str``.

    Accepts strict JSON plus what fastjson writes or reads: unquoted integer and identifier keys,
    single-quoted strings, ``\\v``/``\\x``/``\\0``-``\\7`` escapes, ``\\f``/``\\b`` as whitespace,
    CRLF line ends and a leading byte order mark. ``bytes`` are decoded as UTF-8. Dicts keep the
    file's key order; an array laid out one item per line comes back as a :class:`JavaList`.

    Raises:
        ConfigError: the text is not such a document; ``line`` and the message say where.
    """
    if isinstance(text, bytes | bytearray | memoryview):
        raw = bytes(text)
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            line = raw[: e.start].count(b"\n") + 1
            raise ConfigError(f"not UTF-8 (byte {e.start})", path=path, line=line) from None
    if text.startswith("\ufeff"):
        text = text[1:]
    fast = _loads_json(text)
    return fast.value if fast is not None else _Parser(text, path).document()


# ------------------------------------------------------------------------------ the fast path

_INT_KEY_MARK = 0  # a NUL opens the quoted form of a bare integer key: the fast path runs on NUL-free text only
_WS_BYTES = (32, 9, 10, 13)


class _Fallback(Exception):
    """The text leaves what the json module reads exactly as :class:`_Parser` does."""


@dataclass(frozen=True, slots=True)
class _Parsed:
    value: Any


def _pairs(pairs: list[tuple[str, Any]]) -> dict[Any, Any]:
    return {int(k[1:]) if k[:1] == "\x00" else k: v for k, v in pairs}


def _no_constant(name: str) -> Any:
    raise _Fallback(name)


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _Fallback(text)
    return value


def _back(arr: np.ndarray, pos: np.ndarray, skip: tuple[int, ...] | None = None, digits: bool = False) -> np.ndarray:
    """For each position, the nearest position at or before it whose byte is not skipped (-1: none)."""
    import numpy as np

    pos = pos.copy()
    while True:
        ok = pos >= 0
        b = arr[np.where(ok, pos, 0)]
        more = ok & (((b >= 48) & (b <= 57)) if digits else np.isin(b, skip))
        if not more.any():
            return pos
        pos[more] -= 1


def _outside(real_quotes: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """Which positions lie outside strings (an even number of real quotes before them)."""
    import numpy as np

    return np.searchsorted(real_quotes, positions) % 2 == 0


def _quote_int_keys(raw: bytes) -> bytes | None:
    """``raw`` with fastjson's bare integer keys quoted (``0:5`` -> ``"\\x000":5``), or None when the text
    holds what only :class:`_Parser` reads exactly: single quotes, arrays (their layout decides
    :class:`JavaList`), nesting deeper than ``_MAX_DEPTH``. numpy over the bytes, no per-token Python."""
    import numpy as np

    arr = np.frombuffer(raw, dtype=np.uint8)
    quotes = np.flatnonzero(arr == 34).astype(np.int64)
    escaped = np.zeros(len(quotes), dtype=bool)
    j = quotes - 1
    while True:  # an odd run of backslashes before a quote escapes it
        run = (j >= 0) & (arr[np.maximum(j, 0)] == 92)
        if not run.any():
            break
        escaped ^= run
        j = np.where(run, j - 1, -1)
    real = quotes[~escaped]
    for byte in (39, 91):  # ' and [ outside strings
        at = np.flatnonzero(arr == byte)
        if _outside(real, at).any():
            return None
    braces = np.flatnonzero((arr == 123) | (arr == 125))
    braces = braces[_outside(real, braces)]
    if len(braces) and int(np.cumsum(np.where(arr[braces] == 123, 1, -1)).max()) > _MAX_DEPTH:
        return None
    colons = np.flatnonzero(arr == 58)
    colons = colons[_outside(real, colons)]
    end = _back(arr, colons - 1, _WS_BYTES)  # the key's last byte
    is_digit = (end >= 0) & (arr[np.maximum(end, 0)] >= 48) & (arr[np.maximum(end, 0)] <= 57)
    end = end[is_digit]
    start = _back(arr, end, digits=True) + 1
    start -= (start > 0) & (arr[np.maximum(start - 1, 0)] == 45)  # a minus sign
    before = _back(arr, start - 1, _WS_BYTES)
    key = (before >= 0) & ((arr[np.maximum(before, 0)] == 123) | (arr[np.maximum(before, 0)] == 44))  # after { or ,
    # per key: '"' and the mark before its first byte, '"' after its last; keys come in order
    where = np.stack([start[key], start[key], end[key] + 1], axis=1).ravel()
    at = where + np.arange(len(where))  # where each inserted byte lands in the output
    out = np.empty(len(arr) + len(where), dtype=np.uint8)
    kept = np.ones(len(out), dtype=bool)
    kept[at] = False
    out[at] = np.tile(np.array([34, _INT_KEY_MARK, 34], dtype=np.uint8), len(where) // 3)
    out[kept] = arr
    return out.tobytes()


def _loads_json(text: str) -> _Parsed | None:
    """The document read by the json module when that gives exactly what :class:`_Parser` gives, else
    None (the parser then reads it and names what is wrong): strict JSON with fastjson's unquoted
    integer keys, no array, nested at most ``_MAX_DEPTH``."""
    if "\x00" in text or "\\u0000" in text.lower():  # a string could then decode to the key mark
        return None
    quoted = _quote_int_keys(text.encode("utf-8", "surrogatepass"))
    if quoted is None:
        return None
    try:
        value = json.loads(
            quoted, object_pairs_hook=_pairs, parse_float=_finite, parse_constant=_no_constant, strict=False
        )
    except (_Fallback, ValueError, RecursionError):
        return None
    return _Parsed(value)


# ------------------------------------------------------------------------------------- writing

_STRING_ESCAPES: dict[int, str] = {c: f"\\u{c:04X}" for c in range(0x20)}  # IOUtils.DIGITS: upper case
_STRING_ESCAPES.update({0x08: "\\b", 0x09: "\\t", 0x0A: "\\n", 0x0C: "\\f", 0x0D: "\\r"})
_STRING_ESCAPES.update({0x22: '\\"', 0x5C: "\\\\"})
_STRING_ESCAPES.update({c: f"\\u{c:04X}" for c in range(0x7F, 0xA0)})  # specicalFlags_doubleQuotes
_STRING_ESCAPES.update({0x2028: "\\u2028", 0x2029: "\\u2029"})


def _quote(s: str) -> str:
    """``SerializeWriter.writeStringWithDoubleQuote`` without BrowserCompatible; '/' stays as is."""
    return '"' + s.translate(_STRING_ESCAPES) + '"'


def _java_double(x: float) -> str:
    """Java ``Double.toString`` of the shortest representation (what fastjson's RyuDouble writes)."""
    if not math.isfinite(x):
        return "null"  # fastjson writes NaN and infinities as null
    if x == 0.0:
        return "-0.0" if math.copysign(1.0, x) < 0 else "0.0"
    from decimal import Decimal  # here: only a config value holding a float needs it

    d = Decimal(repr(x)).normalize()
    if 1e-3 <= abs(x) < 1e7:
        s = format(d, "f")
        return s if "." in s else s + ".0"
    sign, digits, exponent = d.as_tuple()
    if not isinstance(exponent, int):  # unreachable: x is finite
        return "null"
    ds = "".join(map(str, digits))
    e10 = exponent + len(ds) - 1
    return f"{'-' if sign else ''}{ds[0]}.{ds[1:] or '0'}E{e10}"


def _write(obj: Any, indent: int, pretty: bool, out: list[str]) -> None:
    if obj is None:
        out.append("null")
    elif obj is True:
        out.append("true")
    elif obj is False:
        out.append("false")
    elif isinstance(obj, int):
        out.append(str(int(obj)))
    elif isinstance(obj, float):
        out.append(_java_double(obj))
    elif isinstance(obj, str):
        out.append(_quote(obj))
    elif isinstance(obj, Mapping):
        _write_map(obj, indent, pretty, out)
    elif isinstance(obj, JavaList) and pretty:
        # ListSerializer, PrettyFormat: every item on its own line one level deeper.
        if not obj:
            out.append("[]")
            return
        out.append("[")
        for i, item in enumerate(obj):
            if i:
                out.append(",")
            out.append("\n" + "\t" * (indent + 1))
            _write(item, indent + 1, pretty, out)
        out.append("\n" + "\t" * indent + "]")
    elif isinstance(obj, list | tuple):
        # CollectionCodec (Set) and primitive arrays: one line, items at the current indent.
        out.append("[")
        for i, item in enumerate(obj):
            if i:
                out.append(",")
            _write(item, indent, pretty, out)
        out.append("]")
    else:
        raise TypeError(f"cannot write a {type(obj).__name__} as fastjson")


def _write_map(obj: Mapping[Any, Any], indent: int, pretty: bool, out: list[str]) -> None:
    """``MapSerializer``: newline before string keys only; closing newline if the map is non-empty."""
    out.append("{")
    inner = indent + 1
    first = True
    for key, value in obj.items():
        if value is None:  # null values are skipped (no WriteMapNullValue)
            continue
        if not first:
            out.append(",")
        if isinstance(key, str):
            if pretty:
                out.append("\n" + "\t" * inner)
            out.append(_quote(key))
        elif isinstance(key, int) and not isinstance(key, bool):
            out.append(str(int(key)))  # Integer/Long keys are written bare, on the same line
        else:
            raise TypeError(f"cannot write a {type(key).__name__} map key as fastjson")
        out.append(":")
        _write(value, inner, pretty, out)
        first = False
    if pretty and len(obj) > 0:
        out.append("\n" + "\t" * indent)
    out.append("}")


def dumps(obj: Any, *, pretty: bool = True) -> str:
    """Serialise ``obj`` exactly as fastjson 1.2.51-1.2.83 ``toJSONString`` does (§11.2).

    ``pretty=True`` is ``SerializerFeature.PrettyFormat`` (what ``ConfigManager.persist`` writes),
    ``pretty=False`` the compact one-line form. No trailing newline. Dicts are written in their
    own order (``None`` values skipped); str keys are quoted, int keys written bare. Floats follow
    Java's ``Double.toString``. U+00A0 is written raw (some fastjson builds escape it).

    Raises:
        TypeError: ``obj`` holds something other than dict, list, tuple, str, int, float, bool,
            ``None``, or a map key other than str or int.
    """
    out: list[str] = []
    _write(obj, 0, pretty, out)
    return "".join(out)


def bean(fields: Mapping[str, Any] | None = None, /, **kw: Any) -> dict[str, Any]:
    """A Java bean as fastjson writes it: properties sorted by name, ``None`` ones left out."""
    merged = {**(fields or {}), **kw}
    return {k: merged[k] for k in sorted(merged) if merged[k] is not None}


# ------------------------------------------------------------------------------- files on disk

Source = Literal["file", "bak", "missing"]


@dataclass(frozen=True, slots=True)
class ConfigFile:
    """One config file as the broker would load it.

    ``path`` is the main file (``config/<name>``) even when the data came from ``.bak``; ``raw``
    holds the bytes that were parsed (``None`` for ``missing``). ``skipped`` is the error of a main
    file that existed but could not be used, when ``.bak`` (or the empty state) was used instead.
    """

    path: Path
    data: Any
    source: Source
    raw: bytes | None
    skipped: ConfigError | None = None


def _check_name(name: str) -> None:
    if not name or name in (".", "..") or "/" in name or "\0" in name or os.sep in name:
        raise InputError(f"bad config file name {name!r}")


def _decode_file(raw: bytes, path: Path) -> Any:
    data = loads(raw, path=path)
    if not isinstance(data, dict):
        raise ConfigError("the document is not a JSON object", path=path, line=1)
    return data


def byte_of(raw: bytes, line: int | None, what: str) -> int | None:
    """Byte position of a parse error given its line and ``(column N)`` in the message."""
    if line is None:
        return None
    start = 0
    for _ in range(line - 1):
        nl = raw.find(b"\n", start)
        if nl < 0:
            break
        start = nl + 1
    m = re.search(r"\(column (\d+)\)", what)
    if not m:
        return start
    end = raw.find(b"\n", start)
    text = raw[start : end if end >= 0 else len(raw)].decode("utf-8", "replace")
    return start + len(text[: int(m.group(1)) - 1].encode("utf-8"))


COMPACTION_CHECKPOINTS = ("position-checkpoint", "position-checkpoint.bak")  # compaction/, 5.x


def read_config(config_dir: Path, name: str) -> ConfigFile:
    """Load ``<config_dir>/<name>`` by the broker's rule (``ConfigManager.load``, §11.1).

    The main file is used unless it is missing, empty (0 bytes), unreadable or unparsable; then
    ``<name>.bak``. A missing or empty ``.bak`` is the empty state (``data == {}``, source
    ``"missing"``), as in the broker, even when the main file was unparsable: ``skipped`` then
    holds that error so a caller can refuse to act on it.

    Raises:
        ConfigError: ``.bak`` is needed but unparsable. The error names the main file when that
            was unparsable too, else the ``.bak`` file.
    """
    _check_name(name)
    main = Path(config_dir) / name
    bak = main.with_name(name + ".bak")
    skipped: ConfigError | None = None
    try:
        raw: bytes | None = read_file(main, root=main.parent.parent)
    except FileNotFoundError:
        raw = None
    except OSError as e:
        raw = None
        skipped = ConfigError(f"cannot read: {e.strerror or e}", path=main)
    if raw:
        try:
            return ConfigFile(main, _decode_file(raw, main), "file", raw)
        except ConfigError as e:
            skipped = e
    try:
        bak_raw: bytes | None = read_file(bak, root=bak.parent.parent)
    except FileNotFoundError:
        bak_raw = None
    except OSError as e:
        raise ConfigError(f"cannot read: {e.strerror or e}", path=bak) from None
    if not bak_raw:
        return ConfigFile(main, {}, "missing", None, skipped)
    try:
        data = _decode_file(bak_raw, bak)
    except ConfigError as e:
        if skipped is None:
            raise
        what = f"{skipped.what}; {bak.name} is unusable too: line {e.line}: {e.what}"
        raise ConfigError(what, path=main, line=skipped.line) from e
    return ConfigFile(main, data, "bak", bak_raw, skipped)


def _write_synced(path: Path, data: bytes, mode: int) -> None:
    fd = open_fd(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)


def write_config(
    config_dir: Path,
    name: str,
    data: Any,
    *,
    broker_version: str = "4.4.0",
    pretty: bool | None = None,
) -> None:
    """Persist ``data`` as ``<config_dir>/<name>`` the way the broker does (§11.1), crash-safely.

    Both broker sequences end with ``<name>`` holding the new text and ``<name>.bak`` the previous
    bytes of ``<name>`` (when it existed; an existing empty file is copied too, as the broker does).

    * up to 5.0.x: the new text goes to the broker's own ``<name>.tmp`` (written and fsynced),
      the current file is copied to ``.bak``, then ``.tmp`` is renamed over ``<name>``;
    * 5.1.0 and later: the current file is copied to ``.bak``, then ``<name>`` is written.

    Unlike the broker, the ``.bak`` copy and (5.1+) the main write go through
    :func:`~rmqstore.fsutil.atomic_write` and the rename is followed by a directory fsync, so a
    kill at any point leaves ``<name>`` old-or-new and ``.bak`` whole. No temp file is left
    behind on success. ``pretty=None`` picks the broker's layout for ``name``: compact for
    ``timermetrics``/``transactionMetrics``, pretty otherwise. The file mode is kept.

    Raises:
        ConfigError: the directory or a file cannot be written.
        TypeError: ``data`` holds a value :func:`dumps` cannot write.
    """
    _check_name(name)
    if pretty is None:
        pretty = name not in COMPACT_FILES
    payload = dumps(data, pretty=pretty).encode("utf-8", "replace")  # '?' for lone surrogates, as Java
    main = Path(config_dir) / name
    bak = main.with_name(name + ".bak")
    try:
        main.parent.mkdir(parents=True, exist_ok=True)
        try:
            mode = stat.S_IMODE(main.stat().st_mode)
            old: bytes | None = main.read_bytes()
        except FileNotFoundError:
            mode, old = 0o644, None
        if rules_for(broker_version).config_write_via_tmp:
            tmp = main.with_name(name + ".tmp")  # the broker's own temp name
            try:
                _write_synced(tmp, payload, mode)
                if old is not None:
                    atomic_write(bak, old, mode=mode)
                os.replace(tmp, main)
            except BaseException:
                tmp.unlink(missing_ok=True)
                raise
            fsync_dir(main.parent)
        else:
            if old is not None:
                atomic_write(bak, old, mode=mode)
            atomic_write(main, payload, mode=mode)
    except OSError as e:
        raise ConfigError(f"cannot write: {e.strerror or e}", path=main) from None


# ----------------------------------------------------------------------------- typed views


def _fail_shape(what: str, path: str | Path) -> NoReturn:
    raise ConfigError(what, path=path)


def _table(data: Any, key: str, path: str | Path) -> Mapping[Any, Any]:
    if not isinstance(data, Mapping):
        _fail_shape("the document is not a JSON object", path)
    table = data.get(key)
    if table is None:
        return {}
    if not isinstance(table, Mapping):
        _fail_shape(f"{key} is not an object", path)
    return table


def _put_sorted(d: dict[str, Any], key: str, value: Any) -> None:
    """Set a bean property, keeping the properties in fastjson's alphabetical order."""
    if key in d:
        d[key] = value
        return
    d[key] = value
    items = sorted(d.items())
    d.clear()
    d.update(items)


def _int_or_fail(value: Any, what: str, path: str | Path) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        _fail_shape(f"{what} is not an integer: {value!r}", path)
    return value


@dataclass(frozen=True, slots=True)
class TopicConfig:
    """One ``topicConfigTable`` entry (§11.3). Defaults are Java's ``new TopicConfig(name)``.

    ``attributes`` is the 5.x attribute map (keys without the ``+``/``-`` command-line prefix);
    ``None`` means the property is absent, as in every 4.x file.
    """

    topic_name: str
    read_queue_nums: int = 16
    write_queue_nums: int = 16
    perm: int = PERM_READ | PERM_WRITE
    topic_filter_type: str = "SINGLE_TAG"  # or "MULTI_TAG"
    topic_sys_flag: int = 0  # bit 0 unit, bit 1 unit-sub
    order: bool = False
    attributes: dict[str, str] | None = None


def _prop(entry: Mapping[str, Any], prop: str, typ: type, default: Any, path: str | Path) -> Any:
    """A bean property; absent or null gives ``default`` (fastjson leaves the field as constructed)."""
    value = entry.get(prop)
    if value is None:
        return default
    if not isinstance(value, typ) or (typ is int and isinstance(value, bool)):
        name = entry.get("topicName", "?")
        _fail_shape(f"topic {name!r}: {prop} has the wrong type: {value!r}", path)
    return value


def load_topics(data: Any, *, path: str | Path = "topics.json") -> dict[str, TopicConfig]:
    """``topicConfigTable`` as ``{table key: TopicConfig}``; absent properties take Java's defaults.

    Raises:
        ConfigError: the table or an entry has the wrong shape or a property the wrong type.
    """
    out: dict[str, TopicConfig] = {}
    for key, entry in _table(data, "topicConfigTable", path).items():
        if not isinstance(key, str) or not isinstance(entry, Mapping):
            _fail_shape(f"topicConfigTable entry {key!r} is not a topic object", path)

        attributes = entry.get("attributes")
        if attributes is not None:
            if not isinstance(attributes, Mapping) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in attributes.items()
            ):
                _fail_shape(f"topic {key!r}: attributes is not a string map", path)
            attributes = dict(attributes)
        defaults = TopicConfig(key)
        out[key] = TopicConfig(
            topic_name=_prop(entry, "topicName", str, key, path),
            read_queue_nums=_prop(entry, "readQueueNums", int, defaults.read_queue_nums, path),
            write_queue_nums=_prop(entry, "writeQueueNums", int, defaults.write_queue_nums, path),
            perm=_prop(entry, "perm", int, defaults.perm, path),
            topic_filter_type=_prop(entry, "topicFilterType", str, defaults.topic_filter_type, path),
            topic_sys_flag=_prop(entry, "topicSysFlag", int, defaults.topic_sys_flag, path),
            order=_prop(entry, "order", bool, defaults.order, path),
            attributes=attributes,
        )
    return out


def topic_to_bean(tc: TopicConfig) -> dict[str, Any]:
    """The ``topicConfigTable`` value the broker writes for ``tc`` (properties sorted, §11.3)."""
    return bean(
        attributes=None if tc.attributes is None else dict(tc.attributes),
        order=tc.order,
        perm=tc.perm,
        readQueueNums=tc.read_queue_nums,
        topicFilterType=tc.topic_filter_type,
        topicName=tc.topic_name,
        topicSysFlag=tc.topic_sys_flag,
        writeQueueNums=tc.write_queue_nums,
    )


_TOPIC_MAX_LENGTH = 127  # TopicValidator.TOPIC_MAX_LENGTH (4.4.0 clients allowed 255)


def _is_5x(broker_version: str) -> bool:
    return rules_for(broker_version).five


def auto_create_topic(
    name: str,
    *,
    template: TopicConfig | None = None,
    default_queue_nums: int = 8,
    client_queue_nums: int = 4,
    topic_sys_flag: int = 0,
    broker_version: str = "4.4.0",
) -> TopicConfig:
    """The topic the broker creates on the first send to an unknown topic (§12).

    ``TopicConfigManager.createTopicInSendMessageMethod``: queues = min(the producer's
    ``defaultTopicQueueNums``, the template's ``writeQueueNums``) for both read and write; perm =
    the template's perm without PERM_INHERIT; filter type from the template; ``order`` false.
    The template is ``TBW102``; pass it as ``template`` when topics.json has it, else one is
    assumed with ``default_queue_nums`` queues (the broker's ``defaultTopicQueueNums``, 8) and perm
    7. ``client_queue_nums`` is the producer's ``defaultTopicQueueNums`` (4 in every client), so
    by default an auto-created topic has **4** read and 4 write queues, perm 6, SINGLE_TAG,
    sysflag 0 (the ``TopicTest`` entries in real stores). 5.x adds an empty ``attributes`` map.

    Raises:
        InputError: a name the broker rejects, or a template without PERM_INHERIT (the broker
            then refuses to auto-create).
    """
    if not rules_for(broker_version).broker_checks_topic_name:  # 4.4.0: any one directory name
        why = queue_name_problem(name)
        if why is not None:
            raise InputError(f"topic name '{shown(name)}' is not allowed: {why}")
    elif not TOPIC_VALIDATOR_RE.match(name) or len(name) > _TOPIC_MAX_LENGTH:
        raise InputError(f"topic name {name!r} is not allowed (characters %|a-zA-Z0-9_-, at most 127)")
    if template is None:
        template = TopicConfig(
            AUTO_CREATE_TEMPLATE,
            read_queue_nums=default_queue_nums,
            write_queue_nums=default_queue_nums,
            perm=PERM_READ | PERM_WRITE | PERM_INHERIT,
        )
    if not template.perm & PERM_INHERIT:
        raise InputError(
            f"{template.topic_name} has perm {template.perm} without PERM_INHERIT: "
            "the broker would not auto-create the topic"
        )
    queue_nums = max(0, min(client_queue_nums, template.write_queue_nums))
    return TopicConfig(
        topic_name=name,
        read_queue_nums=queue_nums,
        write_queue_nums=queue_nums,
        perm=template.perm & ~PERM_INHERIT,
        topic_filter_type=template.topic_filter_type,
        topic_sys_flag=topic_sys_flag,
        order=False,
        attributes={} if _is_5x(broker_version) else None,
    )


def bump_data_version(data: dict[str, Any], *, now_ms: int, broker_version: str = "4.4.0") -> None:
    """``DataVersion.nextVersion()``: counter + 1, timestamp = ``now_ms``, in place.

    A missing ``dataVersion`` is created (counter 1, and ``stateVersion`` 0 for 5.x). The 3.x
    spelling ``timestatmp`` is updated where a file uses it.
    """
    dv = data.get("dataVersion")
    if not isinstance(dv, dict):
        stamp = 0 if _is_5x(broker_version) else None
        _put_sorted(data, "dataVersion", bean(counter=1, stateVersion=stamp, timestamp=now_ms))
        return
    counter = dv.get("counter", 0)
    if isinstance(counter, bool) or not isinstance(counter, int):
        counter = 0
    dv["counter"] = counter + 1
    ts_key = "timestatmp" if "timestatmp" in dv and "timestamp" not in dv else "timestamp"
    _put_sorted(dv, ts_key, now_ms)


def set_topic(data: dict[str, Any], tc: TopicConfig, *, now_ms: int, broker_version: str = "4.4.0") -> None:
    """Insert or replace ``tc`` in topics.json ``data`` (in place) and bump ``dataVersion``.

    A replaced entry keeps its place in the table and any property this module does not know
    (newer brokers); a new topic goes at the end. ``data`` may be ``{}`` (a missing file).
    """
    table = data.get("topicConfigTable")
    if not isinstance(table, dict):
        table = {}
        _put_sorted(data, "topicConfigTable", table)
    new = topic_to_bean(tc)
    old = table.get(tc.topic_name)
    if isinstance(old, Mapping):
        merged = {**old, **new}
        if tc.attributes is None:
            merged.pop("attributes", None)
        new = bean(merged)
    table[tc.topic_name] = new
    bump_data_version(data, now_ms=now_ms, broker_version=broker_version)


def _queue_key(key: Any, what: str, path: str | Path) -> int:
    if isinstance(key, str) and _INT_KEY_RE.fullmatch(key):
        return int(key)  # fastjson also reads quoted numeric keys
    return _int_or_fail(key, what, path)


def load_consumer_offsets(
    data: Any, *, path: str | Path = "consumerOffset.json"
) -> dict[tuple[str, str], dict[int, int]]:
    """``offsetTable`` as ``{(topic, group): {queue id: next offset to consume}}`` (§11.4).

    Keys are split at the **first** ``@``: topic names cannot contain ``@`` (the broker's
    TopicValidator allows ``%|a-zA-Z0-9_-`` only) while group names are checked only by clients,
    so anything after the first ``@`` is the group. Keys without ``@`` are skipped: every broker
    lookup builds ``topic@group``, so it never finds them.

    Raises:
        ConfigError: the table, a queue map, a queue id or an offset has the wrong shape.
    """
    out: dict[tuple[str, str], dict[int, int]] = {}
    for key, queues in _table(data, "offsetTable", path).items():
        if not isinstance(key, str):
            _fail_shape(f"offsetTable key {key!r} is not a string", path)
        topic, sep, group = key.partition(TOPIC_GROUP_SEPARATOR)
        if not sep:
            continue
        if not isinstance(queues, Mapping):
            _fail_shape(f"offsetTable[{key!r}] is not a queue map", path)
        if all(type(q) is int and type(v) is int for q, v in queues.items()):  # as fastjson writes it
            out[(topic, group)] = dict(queues)
            continue
        out[(topic, group)] = {
            _queue_key(q, f"{key}: queue id", path): _int_or_fail(v, f"{key}: offset", path) for q, v in queues.items()
        }
    return out


def set_consumer_offset(data: dict[str, Any], topic: str, group: str, queue_id: int, offset: int) -> None:
    """Set the committed offset of ``group`` on ``topic`` queue ``queue_id`` in place (§11.4).

    Existing keys keep their order (a queue id written quoted stays quoted); a new ``topic@group``
    or queue id goes at the end. A 5.x ``groupTopicMap`` present in ``data`` gets the topic added.
    ``dataVersion`` is not bumped: the broker bumps it only every N commits.

    Raises:
        InputError: an empty name, ``@`` in the topic, or an id/offset outside Java's range.
    """
    _check_commit(topic, group, offset)
    if isinstance(queue_id, bool) or not 0 <= queue_id <= _JAVA_INT_MAX:
        raise InputError(f"queue id {queue_id!r} is out of range")
    table = _own_table(data, "offsetTable")
    key = f"{topic}{TOPIC_GROUP_SEPARATOR}{group}"
    queues = table.get(key)
    if not isinstance(queues, dict):
        queues = {}
        table[key] = queues
    if queue_id not in queues and str(queue_id) in queues:
        queues[str(queue_id)] = offset
    else:
        queues[queue_id] = offset
    group_topics = data.get("groupTopicMap")
    if isinstance(group_topics, dict) and TOPIC_GROUP_SEPARATOR not in group:
        topics = group_topics.get(group)
        if isinstance(topics, list):
            if topic not in topics:
                topics.append(topic)
        else:
            group_topics[group] = [topic]


LMQ_PREFIX = "%LMQ%"  # MixAll.LMQ_PREFIX


def is_lmq(name: str) -> bool:
    """``MixAll.isLmq``: a light message queue's topic or group name."""
    return name.startswith(LMQ_PREFIX)


def load_lmq_offsets(
    data: Any, *, path: str | Path = "lmqConsumerOffset.json"
) -> dict[tuple[str, str], dict[int, int]]:
    """``lmqOffsetTable`` of 4.9.3+/5.x lmqConsumerOffset.json (``LmqConsumerOffsetManager``):
    ``topic@group`` -> one offset, whatever the queue id; returned as queue 0, where LMQ queues live.

    Raises:
        ConfigError: the table or an offset has the wrong shape.
    """
    out: dict[tuple[str, str], dict[int, int]] = {}
    for key, offset in _table(data, "lmqOffsetTable", path).items():
        if not isinstance(key, str):
            _fail_shape(f"lmqOffsetTable key {key!r} is not a string", path)
        topic, sep, group = key.partition(TOPIC_GROUP_SEPARATOR)
        if sep:
            out[(topic, group)] = {0: _int_or_fail(offset, f"{key}: offset", path)}
    return out


def set_lmq_offset(data: dict[str, Any], topic: str, group: str, offset: int) -> None:
    """Set an LMQ group's committed offset in ``lmqOffsetTable`` in place (``commitOffset`` of an LMQ
    group: one offset per ``topic@group``, the queue id ignored); a new key goes at the end.

    Raises:
        InputError: an empty name, ``@`` in the topic, or an offset outside Java's range.
    """
    _check_commit(topic, group, offset)
    _own_table(data, "lmqOffsetTable")[f"{topic}{TOPIC_GROUP_SEPARATOR}{group}"] = offset


def _check_commit(topic: str, group: str, offset: int) -> None:
    """What the broker's offset key and value must be: ``topic@group`` split back apart, a Java long."""
    if not topic or TOPIC_GROUP_SEPARATOR in topic:
        raise InputError(f"topic {topic!r} must be non-empty and contain no '@'")
    if not group:
        raise InputError("consumer group must be non-empty")
    if isinstance(offset, bool) or not 0 <= offset <= _JAVA_LONG_MAX:
        raise InputError(f"offset {offset!r} is out of range")


def _own_table(data: dict[str, Any], name: str) -> dict[Any, Any]:
    """``data[name]`` as a mapping to update in place, added in its sorted place when missing."""
    table = data.get(name)
    if not isinstance(table, dict):
        table = {}
        _put_sorted(data, name, table)
    return table


def load_delay_offsets(data: Any, *, path: str | Path = "delayOffset.json") -> dict[int, int]:
    """``offsetTable`` of delayOffset.json: delay level (1-based) -> next offset to deliver (§11.5).

    Raises:
        ConfigError: the table, a level or an offset has the wrong shape.
    """
    return {
        _queue_key(level, "delay level", path): _int_or_fail(v, f"delay level {level}: offset", path)
        for level, v in _table(data, "offsetTable", path).items()
    }
