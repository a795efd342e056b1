"""Message records as JSON lines or csv records, a batch at a time from columns (the rows of :mod:`.rows`).

A batch of record positions is decoded with :func:`.arrays.record_arrays`, and the batch's lines are
laid out as one byte matrix, a row per line (:class:`Line`): each field takes columns of its own,
integers as their decimal digits computed as arrays, hosts, topics and store times as codes into a
few texts, keys, tags, uniqKey and the property strings copied from the records, bodies encoded as
base64 or hex for the whole batch at once. A field that holds one value in the whole batch is
written once, as text. A value narrower than its columns is padded with NUL bytes, which no line
holds (JSON escapes them; a csv row whose topic holds one is left to the per-record path), and the
batch's text is the matrix's bytes without its NULs. A plain property string becomes its JSON object
by replacing its separators 0x01 and 0x02, in the batch's text at once (no other field holds those
bytes). A line is byte for byte ``json.dumps(message_row(...))`` compact (or ``csv_line``); the
records this path does not format (V2 or IPv6 records, compressed bodies, store times no calendar
holds, records whose fields do not decode as arrays, records far larger than the batch's others)
are returned as ``slow`` for the per-record path.
"""

from __future__ import annotations

import binascii
import json
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from typing import Any, Protocol

import numpy as np

from rmqstore.codec.arrays import (
    PropertyItems,
    RecordArrays,
    distinct_hosts_v4,
    duplicate_name_rows,
    host_codes_v4,
    record_arrays,
)
from rmqstore.codec.columnar import body_crcs, gather
from rmqstore.codec.commitlog import BORNHOST_V6_FLAG, COMPRESSED_FLAG, MAGIC_V1, STOREHOSTADDRESS_V6_FLAG, host_str
from rmqstore.codec.rows import CRC_MISMATCH, FORMULA_START, csv_cell, store_time

_PORT = struct.Struct(">i")
DERIVED = (b"KEYS", b"TAGS", b"UNIQ_KEY")  # the properties behind keys, tags and uniqKey
_V6 = BORNHOST_V6_FLAG | STOREHOSTADDRESS_V6_FLAG
# Bytes a property name or value may hold for its JSON text to be the bytes themselves: printable
# ASCII but '"' and '\', and the two separators (§3.7).
_PLAIN = np.zeros(256, dtype=bool)
_PLAIN[0x20:0x7F] = True
_PLAIN[[ord('"'), ord("\\")]] = False
_PLAIN[[1, 2]] = True
_LOW_BYTES = np.array([(1 << (8 * k)) - 1 for k in range(8)] + [(1 << 64) - 1], dtype=np.uint64)
_DERIVED_WORDS = [(n, int.from_bytes(n, "little")) for n in DERIVED]  # each name is at most eight bytes
_MAX_PROPS = 2048  # longer property strings go through the property parser (a batch's text stays small)
_NL = ord("\n")
_FORMULA = np.zeros(256, dtype=bool)
_FORMULA[[ord(c) for c in FORMULA_START]] = True
_CSV_QUOTED = ',"\n\r\x00\x01\x02'  # a topic cell holding one is quoted, or holds a byte the batch's text may not
_P10 = np.array([10**k for k in range(1, 20)], dtype=np.uint64)  # a value >= 10**k has more than k digits
_PAIRS = np.frombuffer(b"".join(b"%02d" % i for i in range(100)), dtype="<u2")  # 0-99 as two ASCII digits
_HUNDRED = np.uint64(100)
_FOLD = np.uint64(0x9E3779B97F4A7C15)  # folds a text's 8-byte words into one key
_HEX = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)
_HEX_UPPER = np.frombuffer(b"0123456789ABCDEF", dtype=np.uint8)
_B64 = np.frombuffer(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/", dtype=np.uint8)
# A record this many times the batch's median size (plus some) is formatted on its own: the matrix
# is as wide as the batch's widest line.
_WIDE, _WIDE_SLACK = 2, 512
# bytes.replace costs about 25 times a byte's share of numpy's compress per NUL removed
_REPLACE_NULS = 25


class Times(dict[int, tuple[bytes, bytes]]):
    """Per second of store time: the JSON text of storeTime before and after its milliseconds."""

    def __init__(self, local: bool) -> None:
        super().__init__()
        self.local = local

    def __missing__(self, sec: int) -> tuple[bytes, bytes]:
        text = store_time(sec * 1000, self.local)
        dot = -1 if text is None else text.find(".", text.find("T"))
        if text is None or dot < 0:  # no calendar time: the milliseconds alone would be wrong
            v = self[sec] = (b"", b"")
        else:
            v = self[sec] = (b'"' + text[: dot + 1].encode(), text[dot + 4 :].encode() + b'"')
        return v


class Hosts(dict[tuple[bytes, int, bytes, int], tuple[bytes, bytes, bytes]]):
    """(born host, store host, msgId prefix) as JSON-ready bytes, per born and store address."""

    def __missing__(self, key: tuple[bytes, int, bytes, int]) -> tuple[bytes, bytes, bytes]:
        born_addr, born_port, store_addr, store_port = key
        v = self[key] = (
            host_str(born_addr, born_port).encode(),
            host_str(store_addr, store_port).encode(),
            msg_id_prefix(store_addr, store_port),
        )
        return v


def msg_id_prefix(store_addr: bytes, store_port: int) -> bytes:
    """The first half of an offset msgId (§3.10): the store host's address and port in hex."""
    return (store_addr + _PORT.pack(store_port)).hex().upper().encode()


class Topics(dict[bytes, bytes]):
    """A topic's stored bytes as its JSON string (bytes that are not UTF-8 replaced, as the row does)."""

    def __missing__(self, key: bytes) -> bytes:
        v = self[key] = json.dumps(key.decode("utf-8", "replace"), ensure_ascii=False).encode()
        return v


# ----------------------------------------------------------------------------- the line matrix


def _zero_past(mat: np.ndarray, ends: np.ndarray) -> None:
    """Each row's bytes from ``ends[row]`` on made NUL (the padding after a value narrower than its columns)."""
    mat[np.arange(mat.shape[1]) >= ends[:, None]] = 0


def decimal(col: np.ndarray) -> tuple[np.ndarray, int]:
    """Each integer as ``%d`` writes it, right-aligned in as many columns as the widest takes (NULs
    before the narrower), and the number of NULs."""
    v = col.astype(np.int64, copy=False)
    neg = v < 0
    a = np.abs(v).view(np.uint64)  # the absolute value of -2**63 wraps to itself: 2**63 as uint64
    digits = np.searchsorted(_P10, a, side="right") + 1
    width = digits + neg
    w, d, n = int(width.max()), int(digits.max()), len(v)
    text = fixed_decimal(a, d)
    nuls = n * w - int(width.sum())
    if not nuls and not neg.any():
        return text, 0
    out = np.zeros((n, w), dtype=np.uint8)
    out[:, w - d :] = text
    out[np.arange(w) < (w - digits)[:, None]] = 0  # the zeros before each value's first digit
    minus = np.flatnonzero(neg)
    out[minus, w - 1 - digits[minus]] = ord("-")
    return out, nuls


def fixed_decimal(col: np.ndarray, width: int) -> np.ndarray:
    """Each integer of ``0 <= col < 10**width`` as ``%0{width}d`` writes it."""
    a = col.astype(np.uint64)
    pairs = np.empty((len(a), (width + 1) // 2), dtype="<u2")
    for k in range(pairs.shape[1] - 1, -1, -1):  # two digits a step, from the right
        q = a // _HUNDRED
        pairs[:, k] = _PAIRS[a - q * _HUNDRED]
        a = q
    return pairs.view(np.uint8)[:, pairs.shape[1] * 2 - width :]


def base64_column(u8: np.ndarray, start: np.ndarray, length: np.ndarray) -> tuple[np.ndarray, int]:
    """The base64 text of each ``u8[start:start + length]`` (``b2a_base64`` without newline), NULs after
    the shorter ones, and the number of NULs. One ``b2a_base64`` call encodes every range: each is
    read as whole 3-byte groups, the bytes after it zeroed, and the padding of a last group of one or
    two bytes is then written as base64 writes it ('=' where zero bits would give 'A')."""
    n = len(start)
    top = int(length.max(initial=0))
    if top == int(length.min(initial=0)):
        return _base64_one_length(u8, start, top), 0
    groups = -(-top // 3)
    raw = gather(u8, start, 3 * groups)
    if not (length == 3 * groups).all():
        _zero_past(raw, length)
    enc = np.frombuffer(bytearray(binascii.b2a_base64(raw, newline=False)), dtype=np.uint8).reshape(n, 4 * groups)
    full, rest = np.divmod(length, 3)
    one, two = np.flatnonzero(rest == 1), np.flatnonzero(rest == 2)
    enc[one, 4 * full[one] + 2] = ord("=")
    enc[one, 4 * full[one] + 3] = ord("=")
    enc[two, 4 * full[two] + 3] = ord("=")
    ends = 4 * ((length + 2) // 3)
    nuls = n * 4 * groups - int(ends.sum())
    if nuls:
        _zero_past(enc, ends)
    return enc, nuls


def _base64_one_length(u8: np.ndarray, start: np.ndarray, length: int) -> np.ndarray:
    """``base64_column`` of ranges of one length: the whole 3-byte groups in one call, the last one
    or two bytes and their padding as arrays."""
    full, rest = divmod(length, 3)
    n = len(start)
    text = np.frombuffer(binascii.b2a_base64(gather(u8, start, 3 * full), newline=False), dtype=np.uint8)
    if not rest:
        return text.reshape(n, 4 * full)
    out = np.empty((n, 4 * full + 4), dtype=np.uint8)
    out[:, : 4 * full] = text.reshape(n, 4 * full)
    last = gather(u8, start + 3 * full, 2).astype(np.int64)
    if rest == 1:
        last[:, 1] = 0
    out[:, -4] = _B64[last[:, 0] >> 2]
    out[:, -3] = _B64[((last[:, 0] & 3) << 4) | (last[:, 1] >> 4)]
    out[:, -2] = _B64[(last[:, 1] & 15) << 2] if rest == 2 else ord("=")
    out[:, -1] = ord("=")
    return out


def hex_column(u8: np.ndarray, start: np.ndarray, length: np.ndarray) -> tuple[np.ndarray, int]:
    """The lowercase hex text of each ``u8[start:start + length]``, NULs after the shorter ones."""
    w = int(length.max(initial=0))
    if not w:
        return np.zeros((len(start), 0), dtype=np.uint8), 0
    out = _hex_digits(gather(u8, start, w), _HEX)
    nuls = len(start) * 2 * w - 2 * int(length.sum())
    if nuls:
        _zero_past(out, 2 * length)
    return out, nuls


def _hex_digits(raw: np.ndarray, digits: np.ndarray) -> np.ndarray:
    """Each byte of ``raw`` (rows, width) as two hex ``digits``, high nibble first."""
    out = np.empty((len(raw), 2 * raw.shape[1]), dtype=np.uint8)
    out[:, 0::2] = digits[raw >> 4]
    out[:, 1::2] = digits[raw & 0xF]
    return out


class Line:
    """The lines of a batch as one byte matrix, a row per line: literal texts, and columns of a
    value per row, padded with NUL bytes where a value is narrower than its columns."""

    def __init__(self, rows: int) -> None:
        self.rows = rows
        self.parts: list[bytes | np.ndarray] = []
        self.nuls = 0

    def text(self, literal: bytes) -> None:
        if literal:
            if self.parts and isinstance(self.parts[-1], bytes):
                self.parts[-1] += literal
            else:
                self.parts.append(literal)

    def column(self, mat: np.ndarray, nuls: int) -> None:
        """``mat`` (rows, width) uint8: each row's value, with ``nuls`` NUL bytes in all."""
        if mat.shape[1]:
            self.parts.append(mat)
            self.nuls += nuls

    def ints(self, col: np.ndarray, before: bytes = b"") -> None:
        """``before``, then integers as ``%d``: the leading digits all rows share (offsets and times of a
        batch) as text."""
        self.text(before)
        lo, hi = int(col.min()), int(col.max())
        if lo == hi:
            self.text(b"%d" % lo)
            return
        scale = 10
        while lo > 0 and lo // scale != hi // scale:
            scale *= 10
        if lo > 0 and lo // scale > 0:
            self.text(b"%d" % (lo // scale))
            self.column(fixed_decimal(col - lo // scale * scale, len(str(scale)) - 1), 0)
        else:
            self.column(*decimal(col))

    def codes(self, labels: Sequence[bytes], inverse: np.ndarray, before: bytes = b"") -> None:
        """``before``, then a field whose row ``i`` is ``labels[inverse[i]]``."""
        self.text(before)
        if not len(inverse):
            return
        if len(labels) == 1 or (inverse == inverse[0]).all():
            self.text(labels[int(inverse[0])])
            return
        lens = np.array([len(t) for t in labels], dtype=np.int64)
        table = np.zeros((len(labels), int(lens.max())), dtype=np.uint8)
        for i, t in enumerate(labels):
            table[i, : len(t)] = np.frombuffer(t, dtype=np.uint8)
        self.column(table[inverse], table.shape[1] * self.rows - int(lens[inverse].sum()))

    def ranges(self, src: np.ndarray, start: np.ndarray, length: np.ndarray) -> None:
        """The bytes ``src[start:start + length]`` of each row (length 0: none)."""
        w = int(length.max(initial=0))
        if not w:
            return
        mat = gather(src, start, w)
        nuls = self.rows * w - int(length.sum())
        if nuls:
            _zero_past(mat, length)
        self.column(mat, nuls)

    def objects(self, at: np.ndarray, texts: Sequence[bytes]) -> None:
        """The texts of the rows ``at``, nothing for the others (a few rows' values made one at a time)."""
        if len(at):
            code = np.zeros(self.rows, dtype=np.int64)
            code[at] = np.arange(1, len(at) + 1)
            self.codes([b"", *texts], code)

    def data(self, keep: np.ndarray | None = None) -> bytes:
        """The rows (those of ``keep``), each the concatenation of its parts without NULs."""
        widths = [len(p) if isinstance(p, bytes) else p.shape[1] for p in self.parts]
        template = np.zeros(sum(widths), dtype=np.uint8)  # the literal texts in their places
        columns = []
        at = 0
        for p, w in zip(self.parts, widths, strict=True):
            if isinstance(p, bytes):
                template[at : at + w] = np.frombuffer(p, dtype=np.uint8)
            else:
                columns.append((at, p))
            at += w
        mat = np.empty((self.rows, len(template)), dtype=np.uint8)
        mat[:] = template
        for at, p in columns:
            mat[:, at : at + p.shape[1]] = p
        nuls = self.nuls
        if keep is not None:
            mat = mat[keep]
            nuls = mat.size - int(np.count_nonzero(mat))
        if not nuls:
            return mat.tobytes()
        if nuls * _REPLACE_NULS < mat.size:
            return mat.tobytes().replace(b"\0", b"")
        return mat[mat != 0].tobytes()


# ----------------------------------------------------------------------------- properties


def _unique_codes(key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The first row of each distinct key and each row's code."""
    _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    return first, inverse.reshape(-1)


def _texts_codes(u8: np.ndarray, start: np.ndarray, length: np.ndarray) -> tuple[list[bytes], np.ndarray]:
    """The distinct byte strings at ``start``/``length`` and each row's code: the rows keyed by their
    bytes folded into one integer, the codes then checked against the bytes (two strings that fold
    alike are told apart by comparing them whole)."""
    width = -(-max(int(length.max(initial=0)), 1) // 8) * 8
    mat = gather(u8, start, width)
    _zero_past(mat, length)
    words = mat.view("<u8")
    key = length.astype(np.uint64)
    with np.errstate(over="ignore"):
        for j in range(words.shape[1]):
            key = key * _FOLD + words[:, j]
    first, inverse = _unique_codes(key)
    if not (mat[first][inverse] == mat).all():
        keyed = np.concatenate([length.astype("<u2").view(np.uint8).reshape(-1, 2), mat], axis=1)
        first, inverse = _unique_codes(np.ascontiguousarray(keyed).view(f"V{width + 2}").ravel())
    return [
        u8[s : s + n].tobytes() for s, n in zip(start[first].tolist(), length[first].tolist(), strict=True)
    ], inverse


def _concat(u8: np.ndarray, start: np.ndarray, length: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The ranges one after the other, each followed by a newline, and where each starts in that text."""
    width = int(length.max()) + 1
    mat = gather(u8, start, width)
    mat[np.arange(len(start)), length] = _NL
    offs = np.zeros(len(start), dtype=np.int64)
    np.cumsum(length[:-1] + 1, out=offs[1:])
    if width - 1 == int(length.min()):  # one length: every row whole
        return mat.ravel(), offs
    return mat[np.arange(width) <= length[:, None]], offs


@dataclass
class Marks:
    """The 0x01, 0x02 and newline bytes of a batch's property text (``_concat``): where they are, which
    byte each is, the row it is in, the one before it, and which are newlines."""

    at: np.ndarray
    kind: np.ndarray
    row: np.ndarray
    prev: np.ndarray  # where the mark before it is (-1 before the first)
    newline: np.ndarray  # the indices of the newlines
    ends_only: bool  # newlines only where rows end (no string holds one)


def _marks(text: np.ndarray, offs: np.ndarray) -> Marks:
    at = np.flatnonzero(((text - np.uint8(1)) <= np.uint8(1)) | (text == _NL))
    kind = text[at]
    nl = kind == _NL
    newline = np.flatnonzero(nl)
    ends_only = len(newline) == len(offs)
    if ends_only:  # a row is the newlines before
        row = np.cumsum(nl) - nl
    else:
        row = np.searchsorted(offs, at, "right") - 1
    prev = np.empty_like(at)
    prev[0] = -1
    prev[1:] = at[:-1]
    return Marks(at, kind, row, prev, newline, ends_only)


@dataclass
class Plain:
    """The plain property strings of a batch's text (``_plain_items``)."""

    ok: np.ndarray
    items: PropertyItems
    marks: np.ndarray  # 0x01 and 0x02 before each row, and in all
    newlines: np.ndarray  # newlines before each row, and in all
    names: int  # K when every row's items are the first row's K names in their order (a producer's batch), else 0


def _plain_items(text: np.ndarray, offs: np.ndarray, ends: np.ndarray) -> Plain:
    """Which rows of ``text`` (each a property string without its last 0x02, ended by a newline at
    ``ends``) are plain, their items, and how many separators and how many newlines lie before each
    row (a string that is not plain may hold either). Plain: ``name 0x01 value`` items, both
    non-empty, apart by 0x02, only bytes whose JSON text is themselves, no name twice. Every broker
    version's parser reads such a string the same way (§3.7), and its JSON object is the string with
    the separators replaced."""
    m = len(offs)
    ok = np.ones(m, dtype=bool)
    mk = _marks(text, offs)
    # bytes past printable ASCII (control characters, DEL, >= 0x80) other than the marks, '"' or '\'
    outside = int(np.count_nonzero((text - np.uint8(0x20)) > np.uint8(0x5E)))
    if outside != len(mk.at) or b'"' in (raw := text.tobytes()) or b"\\" in raw:
        odd = ~_PLAIN[text]
        odd[ends] = False
        ok[np.searchsorted(offs, np.flatnonzero(odd), "right") - 1] = False
    # in a row 0x01 and 0x02 alternate from a 0x01, the last one before the newline a 0x01, none next
    # to another or at the row's start (a newline ends the row before)
    prev_kind = np.empty_like(mk.kind)
    prev_kind[0] = _NL
    prev_kind[1:] = mk.kind[:-1]
    fits = np.where(mk.kind == 1, prev_kind != 1, prev_kind == 1) & (mk.at - mk.prev > 1)
    ok[mk.row[~fits]] = False
    ones = np.flatnonzero(mk.kind == 1)  # a 0x01 has at least its row's newline after it
    at, prev, after = mk.at[ones], mk.prev[ones], mk.at[ones + 1]
    items = PropertyItems(mk.row[ones], prev + 1, at - prev - 1, at + 1, after - at - 1, ~ok, ~ok)
    names = _shared_names(text, items, m)
    if names:  # the first row's names are every row's
        ok &= not duplicate_name_rows(text, _first_items(items, names), 1)[0]
    else:
        ok &= ~duplicate_name_rows(text, items, m)
    if mk.ends_only:
        newlines = np.arange(m + 1)
        marks = np.concatenate([[0], mk.newline + 1]) - newlines
    else:
        bounds = np.append(offs, len(text))
        newlines = np.searchsorted(mk.at[mk.newline], bounds)
        marks = np.searchsorted(mk.at, bounds) - newlines
    return Plain(ok, items, marks, newlines, names)


def _first_items(items: PropertyItems, k: int) -> PropertyItems:
    return PropertyItems(*(getattr(items, f.name)[:k] for f in fields(items)))


def _shared_names(text: np.ndarray, items: PropertyItems, m: int) -> int:
    """K when each of the ``m`` rows has K items named as the first row's, in that order; else 0."""
    k = int(np.searchsorted(items.row, 1))
    if not k or len(items.row) != k * m or not (items.row.reshape(m, k) == np.arange(m)[:, None]).all():
        return 0
    lens = items.name_len.reshape(m, k)
    if not (lens == lens[0]).all():
        return 0
    width = int(lens.max())
    names = gather(text, items.name_start, width).reshape(m, k * width)
    if width * k != int(lens[0].sum()):  # names of several lengths: the bytes after each left out
        names = names * (np.arange(width) < items.name_len[:, None]).reshape(m, k * width)
    return k if (names == names[0]).all() else 0


def _named_values(text: np.ndarray, plain: Plain) -> list[np.ndarray]:
    """The items of ``DERIVED`` in the plain rows (a plain row names each once), per name: their names'
    first eight bytes (zero past the name) compared at once; in a batch of shared names (``names``)
    only the first row's."""
    items, k = plain.items, plain.names
    at = items.name_start[:k] if k else items.name_start
    lens = items.name_len[:k] if k else items.name_len
    word = gather(text, at, 8).view("<u8").ravel() & _LOW_BYTES[np.minimum(lens, 8)]
    hits = [np.flatnonzero((word == w) & (lens == len(name))) for name, w in _DERIVED_WORDS]
    if k:
        rows = np.flatnonzero(plain.ok)
        return [rows * k + int(h[0]) if len(h) else h for h in hits]
    good = plain.ok[items.row]
    return [h[good[h]] for h in hits]


@dataclass
class Derived:
    """Where a plain property string's KEYS, TAGS or UNIQ_KEY value lies in the batch's property text."""

    rows: np.ndarray  # rows of the batch holding the name
    start: np.ndarray  # the values in ``PropertyText.text``
    length: np.ndarray

    def per_row(self, rows: int) -> tuple[np.ndarray, np.ndarray]:
        """Start and length of each of the batch's ``rows`` values (length 0 where it has none)."""
        start = np.zeros(rows, dtype=np.int64)
        length = np.zeros(rows, dtype=np.int64)
        start[self.rows] = self.start
        length[self.rows] = self.length
        return start, length


@dataclass
class PropertyText:
    """The property strings of a batch's rows: which are empty, which plain, the JSON object of each
    plain one (in ``objects``), and the values behind keys, tags and uniqKey of the plain ones."""

    empty: np.ndarray
    plain: np.ndarray
    text: np.ndarray  # the plain strings one after the other (the values point into it)
    derived: list[Derived]
    objects: np.ndarray  # the plain strings' objects one after the other
    object_start: np.ndarray  # each row's object in ``objects`` (length 0: not plain)
    object_len: np.ndarray


def property_text(
    u8: np.ndarray, start: np.ndarray, length: np.ndarray, spelling: tuple[bytes, bytes, bytes, bytes]
) -> PropertyText:
    """The batch's property strings: empty, plain (``_plain_items``), their KEYS, TAGS and UNIQ_KEY, and
    the object of each plain one as ``spelling`` writes it (its start, what 0x01 and 0x02 become, its
    end; the two separators' texts of one length), made for all rows by replacing bytes of one text."""
    m = len(start)
    empty = length <= 0
    plain = (length > 1) & (length <= _MAX_PROPS)
    plain[plain] = u8[start[plain] + length[plain] - 1] == 2  # the last 0x02 closes the object
    rows = np.flatnonzero(plain)
    none = np.zeros(0, dtype=np.int64)
    zeros = np.zeros(m, dtype=np.int64)
    if not len(rows):
        no = Derived(none, none, none)
        return PropertyText(
            empty, plain, np.zeros(0, np.uint8), [no] * len(DERIVED), np.zeros(0, np.uint8), zeros, zeros
        )
    n = length[rows] - 1
    text, offs = _concat(u8, start[rows], n)
    found = _plain_items(text, offs, offs + n)
    ok, items, marks, newlines = found.ok, found.items, found.marks, found.newlines
    plain[rows[~ok]] = False
    derived = [
        Derived(rows[items.row[hit]], items.value_start[hit], items.value_len[hit])
        for hit in _named_values(text, found)
    ]
    head, one, two, tail = spelling
    grow, frame = len(one) - 1, len(head) + len(tail)
    objects = text.tobytes().replace(b"\x01", one).replace(b"\x02", two).replace(b"\n", tail + b"\n" + head)
    object_start, object_len = zeros.copy(), zeros.copy()
    object_start[rows] = offs + frame * newlines[:-1] + grow * marks[:-1]
    object_len[rows] = np.where(ok, n + frame + grow * np.diff(marks), 0)
    return PropertyText(
        empty, plain, text, derived, np.frombuffer(head + objects, dtype=np.uint8), object_start, object_len
    )


def _csv_odd(text: np.ndarray, start: np.ndarray, length: np.ndarray) -> np.ndarray:
    """Plain values that are not their own csv cell: holding a comma, or read as a formula (``csv_cell``)."""
    commas = np.zeros(len(text) + 1, dtype=np.int64)
    np.cumsum(text == ord(","), out=commas[1:])
    return (commas[start + length] > commas[start]) | _FORMULA[text[start]]


# ----------------------------------------------------------------------------- a batch's lines


class Frames(Protocol):
    frame_fields: tuple[str, ...]

    def frame_values(self, buf: Any, record_pos: int) -> tuple[int, ...]: ...


PropsJson = Callable[[bytes], tuple[bytes, bytes, bytes, bytes]]


@dataclass
class LineOptions:
    body: str  # base64 | hex | none (text bodies: the per-record path)
    verify_crc: bool
    times: Times
    topics: Topics
    props_json: PropsJson | None  # None with csv
    csv: bool = False  # csv records of ``ROW_FIELDS`` instead of JSON lines


@dataclass
class Lines:
    """The lines of a batch's fast rows (``rows``: their indices), each ended by a newline, the
    indices left to the per-record path, and the rows whose body CRC does not match (with the CRC
    computed)."""

    rows: np.ndarray
    data: bytes
    slow: np.ndarray
    crc_bad: list[tuple[int, int]]


def fast_rows(ra: RecordArrays, times: Times) -> tuple[np.ndarray, np.ndarray, list[bytes], list[bytes]]:
    """The rows this path formats, and their store times' seconds as codes into head and tail texts."""
    fast = ra.ok & (ra.magic == MAGIC_V1) & ((ra.sys_flag & (_V6 | COMPRESSED_FLAG)) == 0) & (ra.phy_offset >= 0)
    size = ra.total_size
    if len(size) and int(size.max()) > _WIDE * int(size.min()) + _WIDE_SLACK:
        fast &= size <= _WIDE * int(np.median(size)) + _WIDE_SLACK  # or every line would be as wide
    secs = ra.store_timestamp_ms // 1000
    uniq, inverse = np.unique(secs, return_inverse=True)
    pairs = [times[s] for s in uniq.tolist()]
    fast &= np.array([bool(h) for h, _ in pairs], dtype=bool)[inverse.reshape(-1)]
    return fast, inverse.reshape(-1), [h for h, _ in pairs], [t for _, t in pairs]


@dataclass
class Batch:
    """The records a batch formats: their buffer, fields, and store seconds as codes into head and tail texts."""

    u8: np.ndarray
    buf: Any
    ra: RecordArrays
    sec_code: np.ndarray
    heads: list[bytes]
    tails: list[bytes]
    frames: list[tuple[str, np.ndarray]]  # the fields of each record's frame (a DLedger entry's)


def message_lines(buf: Any, positions: np.ndarray, opts: LineOptions, framing: Frames | None = None) -> Lines:
    """The JSON lines (or csv records) of the records at ``positions`` (an intact run's) that this path
    formats, with the fields of their frames after the record's."""
    u8 = np.frombuffer(buf, dtype=np.uint8)
    try:
        ra = record_arrays(u8, positions, len(u8))
        fast, sec_code, heads, tails = fast_rows(ra, opts.times)
        rows = np.flatnonzero(fast)
        if not len(rows):
            return Lines(rows, b"", np.flatnonzero(~fast), [])
        if len(rows) < len(fast):
            ra = ra.take(rows)
        frames: list[tuple[str, np.ndarray]] = []
        if framing is not None and framing.frame_fields:
            values = np.array([framing.frame_values(buf, p) for p in ra.pos.tolist()], dtype=np.int64)
            frames = list(zip(framing.frame_fields, values.T, strict=True))
        line = Line(len(rows))
        batch = Batch(u8, buf, ra, sec_code[rows], heads, tails, frames)
        odd, crc_bad = (_csv_fields if opts.csv else _json_fields)(line, batch, opts)
        if not odd.any():
            return Lines(rows, line.data(), np.flatnonzero(~fast), crc_bad)
        fast[rows[odd]] = False  # left to the per-record path after all
        keep = np.cumsum(~odd) - 1
        crc_bad = [(int(keep[i]), c) for i, c in crc_bad if not odd[i]]
        return Lines(rows[~odd], line.data(~odd), np.flatnonzero(~fast), crc_bad)
    finally:
        del u8


def pieces(lines: Lines, slow_lines: Sequence[bytes]) -> list[tuple[bytes, bool]]:
    """The batch's text in record order: runs of fast lines (True) and the per-record path's lines
    (without newline) of the ``slow`` rows between them, each ended by a newline."""
    if not len(lines.slow):
        return [(lines.data, True)] if lines.data else []
    ends = np.flatnonzero(np.frombuffer(lines.data, dtype=np.uint8) == _NL) + 1
    before = np.searchsorted(lines.rows, lines.slow)  # fast lines before each slow row
    cuts = np.concatenate([[0], ends])[before].tolist()
    out: list[tuple[bytes, bool]] = []
    at = 0
    for cut, text in zip(cuts, slow_lines, strict=True):
        if cut > at:
            out.append((lines.data[at:cut], True))
            at = cut
        out.append((text + b"\n", False))
    if at < len(lines.data):
        out.append((lines.data[at:], True))
    return out


def _json_fields(line: Line, b: Batch, opts: LineOptions) -> tuple[np.ndarray, list[tuple[int, int]]]:
    u8, ra = b.u8, b.ra
    _head_fields(line, u8, ra, opts.topics)
    _time_host_fields(line, ra, b.sec_code, (b.heads, b.tails), _JSON_HOSTS)
    props = property_text(u8, ra.props_start, ra.props_len, (b'{"', b'":"', b'","', b'"}'))
    odd = np.flatnonzero(~props.plain & ~props.empty)
    assert opts.props_json is not None
    made = [
        opts.props_json(bytes(b.buf[a : a + n]))
        for a, n in zip(ra.props_start[odd].tolist(), ra.props_len[odd].tolist(), strict=True)
    ]
    nulls = (b'""', b"null", b"null")  # no properties: KEYS is "" (§3.11)
    for k, (spec, d) in enumerate(zip((b',"keys":', b',"tags":', b',"uniqKey":'), props.derived, strict=True)):
        code = np.where(props.empty, 2, 1)  # "" or null
        code[d.rows] = 3  # a quoted value
        code[odd] = 0
        line.codes([b"", b"null", nulls[k], b'"'], code, spec)
        line.ranges(props.text, *d.per_row(line.rows))
        line.codes([b"", b'"'], (code == 3).astype(np.int64))
        line.objects(odd, [m[k + 1] for m in made])
    line.text(b',"properties":')
    _property_object(line, props)
    line.objects(odd, [m[0] for m in made])
    line.ints(ra.body_len, b',"bodyLength":')
    crc_bad = _body_fields(line, b, opts)
    for name, col in b.frames:
        line.ints(col, b',"%s":' % name.encode())
    line.text(b"}\n")
    return np.zeros(line.rows, dtype=bool), crc_bad


def _property_object(line: Line, props: PropertyText) -> None:
    """The object of each plain property string (``property_text``) and of each empty one, nothing for
    the others."""
    line.codes([b"", b"{}"], props.empty.astype(np.int64))
    line.ranges(props.objects, props.object_start, props.object_len)


def _csv_fields(line: Line, b: Batch, opts: LineOptions) -> tuple[np.ndarray, list[tuple[int, int]]]:
    """The csv record of each row: the fields of ``ROW_FIELDS`` as ``csv_cell`` and the csv module write them."""
    u8, ra, sec_code = b.u8, b.ra, b.sec_code
    line.ints(ra.phy_offset, b"message,")
    line.ints(ra.total_size, b",")
    labels, inverse = _texts_codes(u8, ra.topic_start, ra.topic_len)
    cells = [csv_cell(t.decode("utf-8", "replace")) for t in labels]
    odd = np.array([any(c in t for c in _CSV_QUOTED) for t in cells], dtype=bool)[inverse]  # per record
    line.codes([t.encode() for t in cells], inverse, b",")
    for name in ("queue_id", "queue_offset", "body_crc", "flag", "sys_flag", "born_timestamp_ms"):
        line.ints(getattr(ra, name), b",")
    times = [h[1:] for h in b.heads], [t[:-1] for t in b.tails]  # storeTime unquoted
    _time_host_fields(line, ra, sec_code, times, _CSV_HOSTS)
    props = property_text(u8, ra.props_start, ra.props_len, (b'"{""', b'"":""', b'"",""', b'""}"'))
    odd |= ~props.plain & ~props.empty
    for d in props.derived:
        line.text(b",")
        line.ranges(props.text, *d.per_row(line.rows))
        odd[d.rows[_csv_odd(props.text, d.start, d.length)]] = True
    line.text(b",")
    _property_object(line, props)
    line.ints(ra.body_len, b",")
    crc_bad = _body_fields(line, b, opts)
    for _, col in b.frames:
        line.ints(col, b",")
    line.text(b"\n")
    return odd, crc_bad


def _head_fields(line: Line, u8: np.ndarray, ra: RecordArrays, topics: Topics) -> None:
    line.ints(ra.phy_offset, b'{"kind":"message","commitLogOffset":')
    line.ints(ra.total_size, b',"storeSize":')
    labels, inverse = _texts_codes(u8, ra.topic_start, ra.topic_len)
    line.codes([topics[t] for t in labels], inverse, b',"topic":')
    for spec, name in ((b',"queueId":', "queue_id"), (b',"queueOffset":', "queue_offset"), (b',"bodyCRC":', "body_crc"),
                       (b',"flag":', "flag"), (b',"sysFlag":', "sys_flag"), (b',"bornTimestamp":', "born_timestamp_ms")):  # fmt: skip
        line.ints(getattr(ra, name), spec)


def _hosts(ra: RecordArrays) -> tuple[tuple[list[bytes], np.ndarray], tuple[list[bytes], np.ndarray], list[bytes]]:
    """(born host texts, codes), (store host texts, codes) and the msgId prefix of each store host."""
    labels, born = host_codes_v4(ra.born_addr, ra.born_port)
    first, stored = distinct_hosts_v4(ra.store_addr, ra.store_port)
    addrs = [(ra.store_addr[i].tobytes(), int(ra.store_port[i])) for i in first.tolist()]
    store_texts = [host_str(a, p).encode() for a, p in addrs]
    return ([h.encode() for h in labels], born), (store_texts, stored), [msg_id_prefix(a, p) for a, p in addrs]


def _store_time(line: Line, ra: RecordArrays, sec_code: np.ndarray, heads: list[bytes], tails: list[bytes]) -> None:
    """storeTime: its text up to the milliseconds per second, the milliseconds, then the rest."""
    line.codes(heads, sec_code)
    ms = ra.store_timestamp_ms % 1000
    if (ms == ms[0]).all():
        line.text(b"%03d" % int(ms[0]))
    else:
        digits = np.empty((line.rows, 3), dtype=np.uint8)
        digits[:, 0] = ms // 100
        digits[:, 1] = ms // 10 % 10
        digits[:, 2] = ms % 10
        line.column(digits + np.uint8(ord("0")), 0)
    line.codes(tails, sec_code)


def _msg_id(line: Line, ra: RecordArrays, prefixes: list[bytes], stored: np.ndarray) -> None:
    """The offset msgId: store host and port (a code per host), then the physical offset (never
    negative here) in hex, its leading digits shared by the whole batch written once."""
    line.codes(prefixes, stored)
    lo, hi = b"%016X" % int(ra.phy_offset.min()), b"%016X" % int(ra.phy_offset.max())
    same = next((i for i in range(16) if lo[i] != hi[i]), 16)
    line.text(lo[:same])
    if same < 16:
        raw = ra.phy_offset.astype(">u8").view(np.uint8).reshape(-1, 8)
        line.column(_hex_digits(raw, _HEX_UPPER)[:, same:], 0)


_JSON_HOSTS = (b',"bornHost":"', b'","storeTimestamp":', b',"storeTime":', b',"storeHost":"', b'","reconsumeTimes":',
               b',"preparedTransactionOffset":', b',"msgId":"', b'"')  # fmt: skip
_CSV_HOSTS = (b",",) * 7 + (b"",)


def _time_host_fields(
    line: Line, ra: RecordArrays, sec_code: np.ndarray, times: tuple[list[bytes], list[bytes]], texts: Sequence[bytes]
) -> None:
    """bornHost to msgId, each after its text of ``texts`` (``_JSON_HOSTS`` or ``_CSV_HOSTS``), then the last."""
    born, stored, prefixes = _hosts(ra)
    born_host, store_ts, store_time, store_host, reconsume, prepared, msg_id, end = texts
    line.codes(*born, born_host)
    line.ints(ra.store_timestamp_ms, store_ts)
    line.text(store_time)
    _store_time(line, ra, sec_code, *times)
    line.codes(*stored, store_host)
    line.ints(ra.reconsume_times, reconsume)
    line.ints(ra.prepared_transaction_offset, prepared)
    line.text(msg_id)
    _msg_id(line, ra, prefixes, stored[1])
    line.text(end)


def _body_fields(line: Line, b: Batch, opts: LineOptions) -> list[tuple[int, int]]:
    """The body (base64 or hex) and, with ``verify_crc``, crcOk; returns (row, computed CRC) of mismatches.
    In csv: the body, crcOk and why cells."""
    u8, ra, as_csv = b.u8, b.ra, opts.csv
    length = np.maximum(ra.body_len, 0)
    if opts.body != "none":
        line.text(b"," if as_csv else b',"body":"')
        if as_csv and opts.body == "base64":  # a body whose base64 starts with '+' reads as a formula
            line.codes([b"", b"'"], ((length > 0) & (u8[ra.body_start] >> 2 == 62)).astype(np.int64))
        line.column(*(hex_column if opts.body == "hex" else base64_column)(u8, ra.body_start, length))
        line.text(b"" if as_csv else b'"')
    elif as_csv:
        line.text(b",")
    if not opts.verify_crc:
        if as_csv:
            line.text(b",,")
        return []
    computed = body_crcs(b.buf, ra.body_start, length)
    bad = computed != ra.body_crc
    texts = [b',"crcOk":true', b',"crcOk":false,"why":"%s"' % CRC_MISMATCH.encode()]
    if as_csv:
        texts = [b",true,", b",false,%s" % CRC_MISMATCH.encode()]
    line.codes(texts, bad.astype(np.int64))
    rows = np.flatnonzero(bad)
    return list(zip(rows.tolist(), computed[rows].tolist(), strict=True))
