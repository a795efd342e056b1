"""Commit log records (store-format.md §3): V1/V2, IPv4/IPv6 hosts, BLANK, CRC, properties.

A record is decoded from any buffer (``bytes``, ``mmap``, ``memoryview``) at a byte position;
nothing is copied but the body, topic and property bytes of the record asked for. All integers
are big-endian and signed, as Java writes them.
"""

from __future__ import annotations

import base64
import ipaddress
import struct
import zlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rmqstore.codec.fields import Field, table
from rmqstore.errors import ChecksumMismatch, CorruptData, MissingExtra, RecordSizeMismatch
from rmqstore.rules import rules_for

if TYPE_CHECKING:
    import numpy as np

MAGIC_V1 = -626843481  # 0xDAA320A7
MAGIC_V2 = -626843477  # 0xDAA320AB, 5.1.0+: 2-byte topic length
BLANK_MAGIC = -875286124  # 0xCBD43194, end of file
END_FILE_MIN_BLANK_LENGTH = 8

# sysFlag bits (§3.3)
COMPRESSED_FLAG = 0x1
MULTI_TAGS_FLAG = 0x2
TRANSACTION_NOT_TYPE = 0x0
TRANSACTION_PREPARED_TYPE = 0x4
TRANSACTION_COMMIT_TYPE = 0x8
TRANSACTION_ROLLBACK_TYPE = 0xC
TRANSACTION_MASK = 0xC
BORNHOST_V6_FLAG = 0x10
STOREHOSTADDRESS_V6_FLAG = 0x20
NEED_UNWRAP_FLAG = 0x40
INNER_BATCH_FLAG = 0x80
COMPRESSION_TYPE_MASK = 0x700

NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"
_EMPTY_VALUE = NAME_VALUE_SEPARATOR + PROPERTY_SEPARATOR  # an item ending at its 0x01
_EMPTY_NAME = PROPERTY_SEPARATOR + NAME_VALUE_SEPARATOR  # an item starting with its 0x01

PROP_KEYS = "KEYS"
PROP_TAGS = "TAGS"
PROP_UNIQ_KEY = "UNIQ_KEY"
PROP_DELAY = "DELAY"
PROP_REAL_TOPIC = "REAL_TOPIC"
PROP_REAL_QID = "REAL_QID"
PROP_WAIT = "WAIT"
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"

# ---------------------------------------------------------------------------------------------
# The record layout (§3.1), declared once. Every reader and writer of records derives from this
# table: the per-record ``struct`` formats below, and the numpy dtypes of ``codec.columnar``.


# Fields 1-15 of §3.1, up to and including BODYLENGTH. BODY, TOPICLENGTH (1 byte V1 / 2 bytes V2),
# TOPIC, PROPERTIESLENGTH (2 bytes) and PROPERTIES follow (see ``VARIABLE_PART``).
RECORD_HEAD: tuple[Field, ...] = table(
    """
    total_size                   i     TOTALSIZE
    magic                        i     MAGICCODE
    body_crc                     i     BODYCRC
    queue_id                     i     QUEUEID
    flag                         i     FLAG
    queue_offset                 q     QUEUEOFFSET
    phy_offset                   q     PHYSICALOFFSET
    sys_flag                     i     SYSFLAG
    born_timestamp_ms            q     BORNTIMESTAMP
    born_addr                    addr  BORNHOST
    born_port                    i     BORNHOST port
    store_timestamp_ms           q     STORETIMESTAMP
    store_addr                   addr  STOREHOSTADDRESS
    store_port                   i     STOREHOSTADDRESS port
    reconsume_times              i     RECONSUMETIMES
    prepared_transaction_offset  q     PREPARED TRANSACTION OFFSET
    body_len                     i     BODYLENGTH
    """
)
VARIABLE_PART = ("body", "topic_len", "topic", "props_len", "properties")
HEAD_NAMES = tuple(f.name for f in RECORD_HEAD)
_V6_FLAGS = {"born_addr": 0x10, "store_addr": 0x20}  # BORNHOST_V6_FLAG, STOREHOSTADDRESS_V6_FLAG


def _code(f: Field, sys_flag: int) -> str:
    if f.code == "addr":
        return "16s" if sys_flag & _V6_FLAGS[f.name] else "4s"
    return f.code


def head_codes(sys_flag: int = 0) -> tuple[str, ...]:
    """The struct code of each of fields 1-15 for the host widths ``sys_flag`` selects (§3.1, §3.3)."""
    return tuple(_code(f, sys_flag) for f in RECORD_HEAD)


def head_format(sys_flag: int = 0) -> str:
    """The struct format of fields 1-15 for the host widths ``sys_flag`` selects."""
    return ">" + "".join(head_codes(sys_flag))


def head_offsets(sys_flag: int = 0) -> dict[str, int]:
    """Byte position of each head field inside the record for these host widths; ``body`` after them."""
    out, at = {}, 0
    for f in RECORD_HEAD:
        out[f.name] = at
        at += struct.calcsize(">" + _code(f, sys_flag))
    out["body"] = at
    return out


# One struct per host-width combination, indexed by ``(sys_flag & 0x30) >> 4``.
HEAD_STRUCTS: tuple[struct.Struct, ...] = tuple(struct.Struct(head_format(v << 4)) for v in range(4))
HEAD_V4 = HEAD_STRUCTS[0]  # 88 bytes: both hosts IPv4, the common case
HEAD_V4_SIZE = HEAD_V4.size
HEAD_OFFSETS: tuple[dict[str, int], ...] = tuple(head_offsets(v << 4) for v in range(4))
OFFSETS_V4 = HEAD_OFFSETS[0]
MIN_RECORD_SIZE_V1 = HEAD_V4_SIZE + 1 + 2  # 91: empty body, topic and properties, both hosts IPv4
_HEAD = struct.Struct(">ii")  # TOTALSIZE, MAGICCODE: enough to follow the chain
_INT = struct.Struct(">i")
_LONG = struct.Struct(">q")
_SHORT = struct.Struct(">h")
_BYTE = struct.Struct(">b")


def is_v1_ipv4(magic: int, sys_flag: int) -> bool:
    """A V1 record with IPv4 hosts: ``HEAD_V4`` reads its fixed fields and TOPICLENGTH is one byte,
    the layout fast paths read straight from the buffer (§3.1)."""
    return magic == MAGIC_V1 and not sys_flag & (BORNHOST_V6_FLAG | STOREHOSTADDRESS_V6_FLAG)


def head_struct(sys_flag: int) -> struct.Struct:
    """The struct of fields 1-15 for the host widths of ``sys_flag``."""
    return HEAD_STRUCTS[(sys_flag >> 4) & 3]


def cal_msg_length(sys_flag: int, body_len: int, topic_len: int, props_len: int, *, v2: bool = False) -> int:
    """The broker's ``calMsgLength`` (§3.1); negative lengths count as 0."""
    return head_struct(sys_flag).size + max(body_len, 0) + (2 if v2 else 1) + topic_len + 2 + max(props_len, 0)


# 5.2.0+ whole-record CRC property (§3.6): "__CRC32#" 0x01 <10 digits, least significant first> 0x02,
# the last 20 bytes of the properties; the CRC covers the record bytes before them.
CRC32_PROPERTY = "__CRC32#"
CRC32_RESERVED_LEN = 20
_CRC32_HEAD = (CRC32_PROPERTY + NAME_VALUE_SEPARATOR).encode()


def encode_prop_crc(crc: int) -> bytes:
    """The 20-byte CRC property entry for ``crc`` (masked CRC32): digits least significant first."""
    digits = f"{crc & 0x7FFFFFFF:010d}"[::-1]
    return _CRC32_HEAD + digits.encode() + PROPERTY_SEPARATOR.encode()


def prop_crc_check(buf: Any, pos: int, total: int) -> tuple[int | None, int]:
    """(stored CRC or None when the record has no CRC property, CRC computed) of the record at ``pos``."""
    tail = bytes(buf[pos + total - CRC32_RESERVED_LEN : pos + total])
    computed = zlib.crc32(memoryview(buf)[pos : pos + total - CRC32_RESERVED_LEN]) & 0x7FFFFFFF
    digits = tail[len(_CRC32_HEAD) : -1]
    if not tail.startswith(_CRC32_HEAD) or tail[-1:] != b"\x02" or not digits.isdigit():
        return None, computed
    return int(digits[::-1]), computed


def body_crc(body: bytes | memoryview) -> int:
    """BODYCRC as stored: CRC32 of the stored body bytes masked with 0x7FFFFFFF (§3.6)."""
    return zlib.crc32(body) & 0x7FFFFFFF


def parse_properties(raw: str, *, broker: str = "4.4.0") -> dict[str, str]:
    """Decode a property string exactly as the given broker version does (§3.7).

    The one property splitter of the per-record path. When every item is exactly ``name 0x01 value``
    with both parts non-empty, every version's parser gives the same map, so one ``split`` builds it;
    anything else is split by the version's own rules.
    """
    if not raw:
        return {}
    body = raw[:-1] if raw[-1] == PROPERTY_SEPARATOR else raw
    if (
        body
        and body[0] != NAME_VALUE_SEPARATOR
        and body[-1] != NAME_VALUE_SEPARATOR
        and _EMPTY_VALUE not in body
        and _EMPTY_NAME not in body
    ):
        try:
            return dict(item.split(NAME_VALUE_SEPARATOR) for item in body.split(PROPERTY_SEPARATOR))  # type: ignore[misc]
        except ValueError:  # an item without exactly one separator: the versions' parsers differ there
            pass
    return parse_properties_by_rules(raw, broker=broker)


def parse_properties_by_rules(raw: str, *, broker: str = "4.4.0") -> dict[str, str]:
    """``parse_properties`` without its shortcut: the given version's parser step by step (§3.7)."""
    props: dict[str, str] = {}
    if not rules_for(broker).new_properties_parser:
        # Java String.split on each separator: trailing empty strings dropped, 2 parts kept.
        for item in raw.split(PROPERTY_SEPARATOR):
            parts = item.split(NAME_VALUE_SEPARATOR)
            while parts and parts[-1] == "":
                parts.pop()
            if len(parts) == 2:
                props[parts[0]] = parts[1]
        return props
    n = len(raw)
    i = 0
    while i < n:
        j = raw.find(PROPERTY_SEPARATOR, i)
        if j < 0:
            j = n
        if j - i >= 3:
            k = raw.find(NAME_VALUE_SEPARATOR, i)
            if i < k < j - 1:
                props[raw[i:k]] = raw[k + 1 : j]
        i = j + 1
    return props


def encode_properties(props: dict[str, str] | list[tuple[str, str]]) -> bytes:
    """``name 0x01 value 0x02`` for every pair, UTF-8 (§3.7)."""
    items = props.items() if isinstance(props, dict) else props
    return "".join(f"{k}{NAME_VALUE_SEPARATOR}{v}{PROPERTY_SEPARATOR}" for k, v in items).encode("utf-8")


def host_str(addr: bytes, port: int) -> str:
    """``192.168.0.1:40000`` or ``[2001:db8::1]:40000``."""
    ip = ipaddress.ip_address(bytes(addr))
    return f"{ip}:{port}" if ip.version == 4 else f"[{ip}]:{port}"


def parse_host(text: str) -> tuple[bytes, int]:
    """Inverse of :func:`host_str`; raises ``ValueError``."""
    text = text.strip()
    if text.startswith("["):
        addr, _, port = text[1:].partition("]:")
    else:
        addr, _, port = text.rpartition(":")
    if not addr or not port:
        raise ValueError(f"host {text!r} is not ip:port")
    p = int(port)
    if not 0 <= p <= 0x7FFFFFFF:
        raise ValueError(f"port {p} out of range")
    return ipaddress.ip_address(addr).packed, p


def offset_msg_id(store_addr: bytes, store_port: int, phy_offset: int) -> str:
    """The broker's msgId: hex of store address, int port and physical offset (§3.10)."""
    return (bytes(store_addr) + struct.pack(">iq", store_port, phy_offset)).hex().upper()


@dataclass(frozen=True, slots=True)
class Blank:
    """BLANK end-of-file record: the rest of the file, from ``pos``, is padding (§3.4)."""

    pos: int
    phy_offset: int  # where the blank starts, file start + pos
    total_size: int  # as stored: bytes to the end of the file


@dataclass(frozen=True, slots=True)
class Record:
    """One commit log message record with every on-disk field (§3.1)."""

    pos: int  # byte position inside its file
    total_size: int
    magic: int
    body_crc: int
    queue_id: int
    flag: int
    queue_offset: int
    phy_offset: int  # the stored PHYSICALOFFSET field
    sys_flag: int
    born_timestamp_ms: int
    born_addr: bytes
    born_port: int
    store_timestamp_ms: int
    store_addr: bytes
    store_port: int
    reconsume_times: int
    prepared_transaction_offset: int
    body: bytes
    topic: str
    properties_raw: str
    broker: str = field(default="4.4.0", compare=False)

    @property
    def version(self) -> int:
        return 2 if self.magic == MAGIC_V2 else 1

    @property
    def properties(self) -> dict[str, str]:
        return parse_properties(self.properties_raw, broker=self.broker)

    @property
    def tags(self) -> str | None:
        return self.properties.get(PROP_TAGS)

    @property
    def keys(self) -> str | None:
        """KEYS as the broker derives it: "" with no properties at all, None when absent (§3.11)."""
        if not self.properties_raw:
            return ""
        return self.properties.get(PROP_KEYS)

    @property
    def uniq_key(self) -> str | None:
        return self.properties.get(PROP_UNIQ_KEY)

    @property
    def transaction_type(self) -> int:
        return self.sys_flag & TRANSACTION_MASK

    @property
    def born_host(self) -> str:
        return host_str(self.born_addr, self.born_port)

    @property
    def store_host(self) -> str:
        return host_str(self.store_addr, self.store_port)

    @property
    def msg_id(self) -> str:
        return offset_msg_id(self.store_addr, self.store_port, self.phy_offset)

    def crc_ok(self) -> bool:
        return body_crc(self.body) == self.body_crc

    def decompressed_body(self, *, path: str = "<buffer>") -> bytes:
        """The body as the producer sent it, uncompressed when sysFlag says so (§3.9).

        Raises CorruptData (at this record) when the stored bytes do not decompress.
        """
        if not self.sys_flag & COMPRESSED_FLAG:
            return self.body
        kind = (self.sys_flag & COMPRESSION_TYPE_MASK) >> 8
        if kind not in COMPRESSION_TYPES:
            raise CorruptData(f"unknown compression type {kind}", path=path, pos=self.pos, phy_offset=self.phy_offset)
        try:
            return decompress_body(kind, self.body)
        except ImportError as e:
            raise MissingExtra(
                f"{COMPRESSION_TYPES[kind]}-compressed bodies need the {e.name!r} package: "
                "pip install 'rmqstore[compression]'"
            ) from None
        except Exception as e:  # zlib.error, lz4 / zstd errors: the bytes are bad
            raise CorruptData(
                f"compressed body ({COMPRESSION_TYPES[kind]}, type {kind}) does not decompress: {e}",
                path=path,
                pos=self.pos,
                phy_offset=self.phy_offset,
            ) from None

    def to_json(self, *, body: str = "base64") -> dict[str, Any]:
        """The record with RocketMQ's own field names (as ``MessageExt`` / truth.json name them)."""
        out: dict[str, Any] = {
            "topic": self.topic,
            "queueId": self.queue_id,
            "queueOffset": self.queue_offset,
            "commitLogOffset": self.phy_offset,
            "storeSize": self.total_size,
            "bodyCRC": self.body_crc,
            "flag": self.flag,
            "sysFlag": self.sys_flag,
            "bornTimestamp": self.born_timestamp_ms,
            "bornHost": self.born_host,
            "storeTimestamp": self.store_timestamp_ms,
            "storeHost": self.store_host,
            "reconsumeTimes": self.reconsume_times,
            "preparedTransactionOffset": self.prepared_transaction_offset,
            "properties": self.properties,
            "bodyLength": len(self.body),
            "msgId": self.msg_id,
        }
        if body != "none":
            out["body"] = render_body(self.body, body)
        return out

    def to_row(self, *, body: str = "base64", verify_crc: bool = False, path: str = "<buffer>") -> dict[str, Any]:
        """``to_json`` with the body decompressed (§3.9), ``bodyError`` if it cannot be, ``crcOk`` when asked."""
        row = self.to_json(body="none")
        if body != "none":
            data = self.body
            if self.sys_flag & COMPRESSED_FLAG:
                try:
                    data = self.decompressed_body(path=path)
                except (CorruptData, MissingExtra) as e:
                    row["bodyError"] = getattr(e, "what", str(e))
            row["body"] = render_body(data, body)
        if verify_crc:
            row["crcOk"] = self.crc_ok()
        return row


# sysFlag bits 8-10 (CompressionType): 0 is zlib for bodies written before the type bits existed
COMPRESSION_TYPES = {0: "zlib", 1: "lz4", 2: "zstd", 3: "zlib"}


def decompress_body(kind: int, data: bytes) -> bytes:
    """A body as RocketMQ's compressors write it: zlib (``Deflater``), an LZ4 frame
    (``LZ4FrameOutputStream``) or zstd frames (``ZstdOutputStream``: streamed, so the frame header
    holds no content size). ImportError when the codec's package is missing."""
    if kind == 1:
        import lz4.frame  # type: ignore[import-not-found]  # the compression extra

        return bytes(lz4.frame.decompress(data))
    if kind == 2:
        import zstandard  # type: ignore[import-not-found]  # the compression extra

        return _zstd_frames(zstandard.ZstdDecompressor(), data)
    return zlib.decompress(data)


def _zstd_frames(dctx: Any, data: bytes) -> bytes:
    """Every frame of ``data``, each decoded as a stream (no content size needed)."""
    out, rest = [], data
    while rest:
        obj = dctx.decompressobj()
        out.append(obj.decompress(rest))
        if not obj.eof:
            raise ValueError("zstd frame is truncated")
        rest = obj.unused_data
    return b"".join(out)


def render_body(data: bytes, mode: str) -> str:
    """Body text for output: ``base64``, ``hex`` or ``text`` (UTF-8, undecodable bytes escaped)."""
    if mode == "base64":
        return base64.b64encode(data).decode("ascii")
    if mode == "hex":
        return data.hex()
    if mode == "text":
        return data.decode("utf-8", "backslashreplace")
    raise ValueError(f"unknown body mode {mode!r}")


# TOTALSIZE and MAGICCODE at a position (the caller checks 8 bytes remain): all a walk of the
# chain needs. The bound method itself, as it runs once per record of every walk.
read_head = _HEAD.unpack_from


def describe_head(buf: Any, pos: int) -> str:
    """TOTALSIZE and MAGICCODE at ``pos`` in words: what an invalid record header claims."""
    total, magic = _HEAD.unpack_from(buf, pos) if pos + 8 <= len(buf) else (0, 0)
    return f"TOTALSIZE {total}, magic 0x{magic & 0xFFFFFFFF:08X}"


def record_version(buf: Any, pos: int) -> int:
    """The layout its MAGICCODE gives the record at ``pos``: 1, 2 (a 2-byte topic length, 5.1.0+), or 0
    when the bytes there are no record's."""
    magic = _HEAD.unpack_from(buf, pos)[1]
    return 1 if magic == MAGIC_V1 else 2 if magic == MAGIC_V2 else 0


def first_v2_and_ipv6(buf: Any, records: np.ndarray) -> set[int]:
    """Indexes (into ``records``, positions of intact records) of the first V2 record and of the first
    record with an IPv6 host: the two layouts a broker version may not read."""
    import numpy as np  # as in checked_sizes: a reader of few records starts without numpy

    u8 = np.frombuffer(buf, dtype=np.uint8)
    try:  # the magic codes differ in their lowest byte only (A7, AB); the IPv6 bits are in sysFlag's lowest
        v2 = (u8[records + OFFSETS_V4["magic"] + 3] == MAGIC_V2 & 0xFF).nonzero()[0][:1]
        v6 = (u8[records + OFFSETS_V4["sys_flag"] + 3] & (BORNHOST_V6_FLAG | STOREHOSTADDRESS_V6_FLAG)).nonzero()[0][:1]
    finally:
        del u8
    return {int(i) for i in (*v2, *v6)}


# TOTALSIZE up to the STOREHOST port: the fixed head before the fields a torn record may have lost
_TORN_HEAD = struct.Struct(">" + "".join(head_codes()[: HEAD_NAMES.index("store_port") + 1]))


def torn_head(buf: Any, pos: int, end: int) -> tuple[int, int, int, int, bytes, int] | None:
    """What the fixed head of a record cut short at ``end`` still says: TOTALSIZE, QUEUEID, QUEUEOFFSET,
    STORETIMESTAMP, STOREHOST address and port. None without a record's MAGICCODE, with IPv6 hosts, or
    when the head does not reach the store port."""
    if end - pos < _TORN_HEAD.size or not record_version(buf, pos):
        return None
    total, _, _, queue_id, _, queue_offset, _, sys_flag, _, _, _, store_ts, store_addr, store_port = (
        _TORN_HEAD.unpack_from(buf, pos)
    )
    if sys_flag & (BORNHOST_V6_FLAG | STOREHOSTADDRESS_V6_FLAG):
        return None
    return total, queue_id, queue_offset, store_ts, store_addr, store_port


def checked_size(buf: Any, pos: int, end: int) -> int | None:
    """TOTALSIZE of the V1/V2 record at ``pos`` if its structure is valid, else None.

    The broker's check without CRC and without copying anything (§3.11 steps 2-7): the same
    verdict as :func:`decode_record`, which callers use to explain a failure. It runs once per
    record of a walk, so it reads only the four length fields.
    """
    if end - pos < MIN_RECORD_SIZE_V1:
        return None
    total, magic = _HEAD.unpack_from(buf, pos)
    if (magic != MAGIC_V1 and magic != MAGIC_V2) or total < MIN_RECORD_SIZE_V1 or total > end - pos:
        return None
    (sys_flag,) = _INT.unpack_from(buf, pos + OFFSETS_V4["sys_flag"])
    stop = pos + total
    p = pos + HEAD_OFFSETS[(sys_flag >> 4) & 3]["body_len"]
    if p + 4 > stop:
        return None
    (body_len,) = _INT.unpack_from(buf, p)
    p += 4 + (body_len if body_len > 0 else 0)
    v2 = magic == MAGIC_V2
    if p + (4 if v2 else 3) > stop:
        return None
    (topic_len,) = (_SHORT if v2 else _BYTE).unpack_from(buf, p)
    if topic_len < 0:
        return None
    p += (2 if v2 else 1) + topic_len
    if p + 2 > stop:
        return None
    (props_len,) = _SHORT.unpack_from(buf, p)
    if props_len > 0 and p + 2 + props_len > stop:
        return None
    return total if cal_msg_length(sys_flag, body_len, topic_len, props_len, v2=v2) == total else None


def checked_sizes(buf: Any, positions: np.ndarray, end: int) -> np.ndarray:
    """:func:`checked_size` of the records at ``positions`` at once: each one's TOTALSIZE, or -1 where it
    would give None. For a reader that checks many records and decodes a few.

    The lengths are read without the bounds checks between them: the fields of a record take exactly
    calMsgLength bytes, so a record whose lengths add up to its TOTALSIZE ends where they say; a read
    clamped into the buffer only happens for a record whose lengths cannot add up.
    """
    import numpy as np  # as in the framing's chain: a command that reads few records starts without numpy

    p = np.asarray(positions, dtype=np.int64)
    size = len(buf)
    if size < MIN_RECORD_SIZE_V1 or not len(p):
        return np.full(len(p), -1, np.int64)
    be32 = np.ndarray((size - 3,), dtype=">i4", buffer=buf, strides=(1,))
    be16 = np.ndarray((size - 1,), dtype=">i2", buffer=buf, strides=(1,))
    i8 = np.ndarray((size,), dtype="i1", buffer=buf, strides=(1,))
    try:
        room = min(end, size) - p
        q = np.where(room >= MIN_RECORD_SIZE_V1, p, 0)  # a record with no room for a head is read at 0
        total, magic = be32[q].astype(np.int64), be32[q + 4]
        variant = (be32[q + OFFSETS_V4["sys_flag"]] >> 4) & 3
        v2 = magic == MAGIC_V2
        head = np.array([s.size for s in HEAD_STRUCTS], np.int64)[variant]
        at = q + np.array([o["body_len"] for o in HEAD_OFFSETS], np.int64)[variant]
        body_len = np.maximum(be32[np.minimum(at, size - 4)], 0).astype(np.int64)
        at = np.minimum(at + 4 + body_len, size - 2)  # TOPICLENGTH: 2 bytes in V2, 1 in V1
        topic_len = np.where(v2, be16[at], i8[at]).astype(np.int64)
        at = np.clip(at + np.where(v2, 2, 1) + topic_len, 0, size - 2)
        props_len = np.maximum(be16[at], 0)
        computed = head + body_len + np.where(v2, 2, 1) + topic_len + 2 + props_len
        ok = (room >= MIN_RECORD_SIZE_V1) & ((magic == MAGIC_V1) | v2) & (total >= MIN_RECORD_SIZE_V1)
        ok &= (total <= room) & (topic_len >= 0) & (computed == total)
        return np.where(ok, total, -1)
    finally:
        del be32, be16, i8


def _read_variable(
    buf: Any, p: int, body_len: int, v2: bool, limit: int, *, path: str, pos: int, phy: int
) -> tuple[bytes, int, str, int, str]:
    """BODY, TOPICLENGTH, TOPIC, PROPERTIESLENGTH and PROPERTIES from ``p`` (§3.1 fields 15-17).

    Reads are bounded by the buffer (``limit``), not by TOTALSIZE, as the broker's are.
    """
    if body_len > 0:
        if p + body_len > limit:
            raise CorruptData(f"BODYLENGTH {body_len} runs past the file end", path=path, pos=pos, phy_offset=phy)
        body = bytes(buf[p : p + body_len])
        p += body_len
    else:
        body = b""
    (topic_len,) = (_SHORT if v2 else _BYTE).unpack_from(buf, p)
    p += 2 if v2 else 1
    if topic_len < 0 or p + topic_len + 2 > limit:
        raise CorruptData(f"bad TOPICLENGTH {topic_len}", path=path, pos=pos, phy_offset=phy)
    topic = bytes(buf[p : p + topic_len]).decode("utf-8", "replace")
    p += topic_len
    (props_len,) = _SHORT.unpack_from(buf, p)
    p += 2
    props_raw = ""
    if props_len > 0:
        if p + props_len > limit:
            raise CorruptData(
                f"PROPERTIESLENGTH {props_len} runs past the file end", path=path, pos=pos, phy_offset=phy
            )
        props_raw = bytes(buf[p : p + props_len]).decode("utf-8", "replace")
    return body, topic_len, topic, props_len, props_raw


def decode_record(
    buf: Any,
    pos: int,
    *,
    path: str = "<buffer>",
    file_from: int = 0,
    end: int | None = None,
    check_crc: bool = False,
    broker: str = "4.4.0",
) -> Record | Blank:
    """Decode the record at ``pos`` the way ``checkMessageAndReturnSize`` reads it (§3.11).

    Raises :class:`CorruptData` (or its subclasses :class:`ChecksumMismatch`,
    :class:`RecordSizeMismatch`) naming ``path`` and ``pos``. An all-zero header is
    reported as corrupt too: callers that treat zeros as end of data check for it first.
    """
    limit = len(buf) if end is None else end
    phy = file_from + pos
    if limit - pos < 8:
        raise CorruptData(f"truncated record header: {limit - pos} bytes left", path=path, pos=pos, phy_offset=phy)
    total, magic = _HEAD.unpack_from(buf, pos)
    if magic == BLANK_MAGIC:
        return Blank(pos, phy, total)
    if magic != MAGIC_V1 and magic != MAGIC_V2:
        raise CorruptData(
            f"bad magic code 0x{magic & 0xFFFFFFFF:08X} (TOTALSIZE {total}), expected 0xDAA320A7",
            path=path,
            pos=pos,
            phy_offset=phy,
        )
    if total <= 0 or total > limit - pos:
        raise CorruptData(
            f"TOTALSIZE {total} does not fit: {limit - pos} bytes left in the file",
            path=path,
            pos=pos,
            phy_offset=phy,
        )
    # The broker reads the fields from the mapped buffer, not bounded by TOTALSIZE: lengths that
    # overrun the record but stay inside the buffer give a size mismatch, past the buffer an error.
    try:
        (sys_flag,) = _INT.unpack_from(buf, pos + OFFSETS_V4["sys_flag"])
        head = head_struct(sys_flag)
        (_, _, crc, queue_id, flag, queue_offset, phy_field, sys_flag, born_ts, born_addr, born_port, store_ts,
         store_addr, store_port, reconsume, prepared, body_len) = head.unpack_from(buf, pos)  # fmt: skip
        body, topic_len, topic, props_len, props_raw = _read_variable(
            buf, pos + head.size, body_len, magic == MAGIC_V2, limit, path=path, pos=pos, phy=phy
        )
    except struct.error:
        raise CorruptData("record cut short", path=path, pos=pos, phy_offset=phy) from None
    computed_size = cal_msg_length(sys_flag, body_len, topic_len, props_len, v2=magic == MAGIC_V2)
    if computed_size != total:
        raise RecordSizeMismatch(path=path, pos=pos, phy_offset=phy, total_size=total, computed=computed_size)
    if check_crc and body_len > 0:
        computed = zlib.crc32(body) & 0x7FFFFFFF
        if computed != crc:
            raise ChecksumMismatch(path=path, pos=pos, phy_offset=phy, stored=crc, computed=computed)
    return Record(
        pos, total, magic, crc, queue_id, flag, queue_offset, phy_field, sys_flag, born_ts, born_addr, born_port,
        store_ts, store_addr, store_port, reconsume, prepared, body, topic, props_raw, broker,
    )  # fmt: skip


def explain_invalid(buf: Any, pos: int, **where: Any) -> CorruptData:
    """Why the record at ``pos`` stops a walk: the decoder's own error for it (the one explanation).

    ``where`` holds ``decode_record``'s keyword arguments (path, file_from, end, check_crc, broker).
    """
    try:
        decode_record(buf, pos, **where)
    except CorruptData as e:
        return e
    return CorruptData(
        "invalid record", path=where.get("path", "<buffer>"), pos=pos, phy_offset=where.get("file_from", 0) + pos
    )


def encode_record(
    *,
    topic: str,
    queue_id: int,
    flag: int = 0,
    queue_offset: int,
    phy_offset: int,
    sys_flag: int = 0,
    born_timestamp_ms: int,
    born_addr: bytes,
    born_port: int,
    store_timestamp_ms: int,
    store_addr: bytes,
    store_port: int,
    reconsume_times: int = 0,
    prepared_transaction_offset: int = 0,
    body: bytes = b"",
    properties: bytes = b"",
    v2: bool = False,
    crc: int | None = None,
) -> bytes:
    """Encode one record; the body CRC is computed unless ``crc`` is given. Raises ``ValueError``."""
    check_head_values(
        queue_id=queue_id, flag=flag, queue_offset=queue_offset, phy_offset=phy_offset, sys_flag=sys_flag,
        born_timestamp_ms=born_timestamp_ms, born_port=born_port, store_timestamp_ms=store_timestamp_ms,
        store_port=store_port, reconsume_times=reconsume_times,
        prepared_transaction_offset=prepared_transaction_offset, body_crc=0 if crc is None else crc,
    )  # fmt: skip
    topic_b = topic.encode("utf-8")
    if not v2 and len(topic_b) > 127:
        raise ValueError(f"topic is {len(topic_b)} bytes; a V1 record holds at most 127")
    if len(topic_b) > 32767:
        raise ValueError("topic longer than 32767 bytes")
    if len(properties) > 32767:
        raise ValueError(f"properties are {len(properties)} bytes; at most 32767 (Short.MAX_VALUE)")
    head = head_struct(sys_flag)
    for name, addr in (("born_addr", born_addr), ("store_addr", store_addr)):
        want = 16 if sys_flag & _V6_FLAGS[name] else 4
        if len(addr) != want:
            raise ValueError(f"{name.split('_')[0]} host address is {len(addr)} bytes but sysFlag says {want}")
    total = cal_msg_length(sys_flag, len(body), len(topic_b), len(properties), v2=v2)
    out = bytearray(total)
    head.pack_into(
        out, 0, total, MAGIC_V2 if v2 else MAGIC_V1, body_crc(body) if crc is None else crc, queue_id, flag,
        queue_offset, phy_offset, sys_flag, born_timestamp_ms, born_addr, born_port, store_timestamp_ms, store_addr,
        store_port, reconsume_times, prepared_transaction_offset, len(body),
    )  # fmt: skip
    p = head.size
    out[p : p + len(body)] = body
    p += len(body)
    (_SHORT if v2 else _BYTE).pack_into(out, p, len(topic_b))
    p += 2 if v2 else 1
    out[p : p + len(topic_b)] = topic_b
    p += len(topic_b)
    _SHORT.pack_into(out, p, len(properties))
    p += 2
    out[p : p + len(properties)] = properties
    return bytes(out)


def check_head_values(**values: int) -> None:
    """Raise ``ValueError`` naming the first head field (§3.1) whose value does not fit its Java type."""
    for f in RECORD_HEAD:
        v = values.get(f.name)
        if v is None or f.code == "addr":
            continue
        bits = 32 if f.code == "i" else 64
        if not -(1 << (bits - 1)) <= v < (1 << (bits - 1)):
            name = "crc" if f.name == "body_crc" else f.name
            raise ValueError(f"{name} {v} does not fit a signed {bits}-bit field")


def compress_body(body: bytes, *, level: int = 5, type_bits: bool = True) -> tuple[bytes, int]:
    """zlib-compress a body as a Java producer does (§3.9); returns the bytes and the sysFlag bits.

    ``type_bits`` marks the type (zlib = 3) in bits 8-10 as producers since 4.9.4 do (``0x301``);
    without it only COMPRESSED_FLAG is set, as older producers did.
    """
    return zlib.compress(body, level), COMPRESSED_FLAG | ((3 << 8) if type_bits else 0)


# Batch wire format (§3.8): the body of a batch send request, one item per inner message.
_BATCH_HEAD = struct.Struct(">iiiii")  # totalSize, magic (0), bodyCRC (0), flag, bodyLen
BATCH_ITEM_OVERHEAD = _BATCH_HEAD.size + 2  # + the properties length


@dataclass(frozen=True, slots=True)
class BatchItem:
    """One inner message of a batch: its own flag, body and properties."""

    flag: int
    body: bytes
    properties_raw: str
    pos: int = 0  # byte position of the item in the batch body (decoding only)

    def properties(self, *, broker: str = "4.4.0") -> dict[str, str]:
        return parse_properties(self.properties_raw, broker=broker)


def encode_batch(items: list[BatchItem] | list[tuple[int, bytes, str]]) -> bytes:
    """The wire body of a batch send (``MessageDecoder.encodeMessages``). Raises ``ValueError``."""
    out = bytearray()
    for item in items:
        flag, body, raw = (item.flag, item.body, item.properties_raw) if isinstance(item, BatchItem) else item
        props = raw.encode("utf-8")
        if len(props) > 32767:
            raise ValueError(f"properties are {len(props)} bytes; at most 32767 (Short.MAX_VALUE)")
        if not -(1 << 31) <= flag < (1 << 31):
            raise ValueError(f"flag {flag} does not fit a signed 32-bit field")
        total = BATCH_ITEM_OVERHEAD + len(body) + len(props)
        out += _BATCH_HEAD.pack(total, 0, 0, flag, len(body)) + body + _SHORT.pack(len(props)) + props
    return bytes(out)


def decode_batch(buf: Any, *, path: str = "<buffer>", start: int = 0, end: int | None = None) -> list[BatchItem]:
    """Split a batch wire body (or a 5.x inner-batch record body) into its messages.

    Raises CorruptData at the first item whose lengths do not fit.
    """
    limit = len(buf) if end is None else end
    items = []
    pos = start
    while pos < limit:
        if limit - pos < BATCH_ITEM_OVERHEAD:
            raise CorruptData(f"truncated batch item: {limit - pos} bytes left", path=path, pos=pos)
        total, _magic, _crc, flag, body_len = _BATCH_HEAD.unpack_from(buf, pos)
        if body_len < 0 or total < BATCH_ITEM_OVERHEAD + body_len or total > limit - pos:
            raise CorruptData(f"batch item size {total} / body length {body_len} do not fit", path=path, pos=pos)
        p = pos + _BATCH_HEAD.size
        body = bytes(buf[p : p + body_len])
        p += body_len
        (props_len,) = _SHORT.unpack_from(buf, p)
        if props_len < 0 or total != BATCH_ITEM_OVERHEAD + body_len + props_len:
            raise CorruptData(
                f"batch item size {total} disagrees with body {body_len} + properties {props_len}", path=path, pos=pos
            )
        raw = bytes(buf[p + 2 : p + 2 + props_len]).decode("utf-8", "replace")
        items.append(BatchItem(flag, body, raw, pos))
        pos += total
    return items


def encode_blank(remaining: int) -> bytes:
    """The 8-byte BLANK header written where a record no longer fits (§3.4)."""
    return _HEAD.pack(remaining, BLANK_MAGIC)


def store_timestamp_at(buf: Any, pos: int) -> int:
    """STORETIMESTAMP of the record at ``pos`` (offset 56, or 68 with an IPv6 born host)."""
    (sys_flag,) = _INT.unpack_from(buf, pos + OFFSETS_V4["sys_flag"])
    (ts,) = _LONG.unpack_from(buf, pos + HEAD_OFFSETS[(sys_flag >> 4) & 3]["store_timestamp_ms"])
    return ts
