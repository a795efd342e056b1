"""Codes and flags as words, for every front end (store-format.md §3.1, §3.3, §4.2, §12).

Nothing here parses bytes or prints: each function takes a value already decoded and returns
text. The command line and the JSON output both use these, so a sysFlag reads the same
everywhere.
"""

from __future__ import annotations

from rmqstore.codec.commitlog import (
    BLANK_MAGIC,
    BORNHOST_V6_FLAG,
    COMPRESSED_FLAG,
    COMPRESSION_TYPE_MASK,
    COMPRESSION_TYPES,
    INNER_BATCH_FLAG,
    MAGIC_V1,
    MAGIC_V2,
    MULTI_TAGS_FLAG,
    NEED_UNWRAP_FLAG,
    STOREHOSTADDRESS_V6_FLAG,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_MASK,
    TRANSACTION_NOT_TYPE,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
)
from rmqstore.codec.consumequeue import EXT_ADDR_MAX, FILLER_SIZE
from rmqstore.codec.indexfile import HEADER_FIELDS, IndexHeader
from rmqstore.timeparse import format_time_ms


def index_header_json(h: IndexHeader | None) -> dict[str, int | None]:
    """An index file header with the format's field names (all None when it cannot be read)."""
    return {f.java: None if h is None else getattr(h, f.name) for f in HEADER_FIELDS}


TRANSACTION_NAMES = {
    TRANSACTION_NOT_TYPE: "not transactional",
    TRANSACTION_PREPARED_TYPE: "transaction prepared",
    TRANSACTION_COMMIT_TYPE: "transaction commit",
    TRANSACTION_ROLLBACK_TYPE: "transaction rollback",
}
# (sysFlag & 0x700) >> 8 when COMPRESSED_FLAG is set; 0 is the legacy zlib marking (§3.3, §3.9)
COMPRESSION_NAMES = COMPRESSION_TYPES
_KNOWN_BITS = (
    COMPRESSED_FLAG
    | MULTI_TAGS_FLAG
    | TRANSACTION_MASK
    | BORNHOST_V6_FLAG
    | STOREHOSTADDRESS_V6_FLAG
    | NEED_UNWRAP_FLAG
    | INNER_BATCH_FLAG
    | COMPRESSION_TYPE_MASK
)

PERM_PRIORITY = 8
PERM_READ = 4
PERM_WRITE = 2
PERM_INHERIT = 1


def magic_name(magic: int) -> str:
    """MAGICCODE as a record kind."""
    if magic == MAGIC_V1:
        return "message V1"
    if magic == MAGIC_V2:
        return "message V2 (2-byte topic length, 5.1.0+)"
    if magic == BLANK_MAGIC:
        return "BLANK (end of file)"
    if magic == 0:
        return "zeros (unwritten space)"
    return f"unknown magic 0x{magic & 0xFFFFFFFF:08X}"


def compression_name(sys_flag: int) -> str | None:
    """The body's compression algorithm, or None when the body is stored as sent."""
    if not sys_flag & COMPRESSED_FLAG:
        return None
    return COMPRESSION_NAMES.get((sys_flag & COMPRESSION_TYPE_MASK) >> 8, "unknown")


_FLAG_WORDS = (
    (MULTI_TAGS_FLAG, "multi tags"),
    (BORNHOST_V6_FLAG, "born host IPv6"),
    (STOREHOSTADDRESS_V6_FLAG, "store host IPv6"),
    (INNER_BATCH_FLAG, "inner batch"),
    (NEED_UNWRAP_FLAG, "needs unwrap"),
)


def sys_flag_words(sys_flag: int) -> list[str]:
    """Every meaning of a SYSFLAG value, one word group per bit or bit field (§3.3)."""
    words = [TRANSACTION_NAMES[sys_flag & TRANSACTION_MASK]]
    comp = compression_name(sys_flag)
    if comp is not None:
        words.append(f"compressed ({comp})")
    elif sys_flag & COMPRESSION_TYPE_MASK:
        words.append("compression type bits set without the compressed flag")
    words += [word for bit, word in _FLAG_WORDS if sys_flag & bit]
    unknown = sys_flag & ~_KNOWN_BITS & 0xFFFFFFFF
    if unknown:
        words.append(f"unknown bits 0x{unknown:X}")
    return words


def describe_sys_flag(sys_flag: int) -> str:
    """``0x301`` -> ``"not transactional, compressed (zlib)"``."""
    return ", ".join(sys_flag_words(sys_flag))


def tags_code_kind(tags_code: int, topic: str | None = None) -> str:
    """What a CQ tagsCode holds (§4.2): ``ext address``, ``delivery time`` or ``tag hash``."""
    if tags_code <= EXT_ADDR_MAX:
        return "ext address"
    if topic == "SCHEDULE_TOPIC_XXXX":
        return "delivery time"
    return "tag hash"


def describe_tags_code(tags_code: int, topic: str | None = None) -> str:
    """A tagsCode in words; delivery times of the delay topic are shown as UTC times."""
    kind = tags_code_kind(tags_code, topic)
    if kind == "ext address":
        return f"ext address {tags_code - (-(1 << 63))}"
    if kind == "delivery time":
        return f"delivery at {format_time_ms(tags_code)}"
    if tags_code == 0:
        return "no tag"
    return f"tag hash {tags_code}"


def describe_cq_entry(phy_offset: int, size: int, tags_code: int) -> str:
    """A consume queue slot: filler, end of data, or a message reference (§4.4)."""
    if phy_offset == 0 and size == FILLER_SIZE and tags_code == 0:
        return "filler (fillPreBlank)"
    if phy_offset < 0 or size <= 0:
        return "end of data"
    return f"message at {phy_offset}, {size} bytes"


def perm_string(perm: int) -> str:
    """``perm2String``: ``R``/``W``/``X`` (inherit) or ``-`` (§12)."""
    return (
        ("R" if perm & PERM_READ else "-") + ("W" if perm & PERM_WRITE else "-") + ("X" if perm & PERM_INHERIT else "-")
    )


def describe_perm(perm: int) -> str:
    """``6`` -> ``"RW- (read, write)"``."""
    words = [
        w
        for bit, w in (
            (PERM_READ, "read"),
            (PERM_WRITE, "write"),
            (PERM_INHERIT, "inherit"),
            (PERM_PRIORITY, "priority"),
        )
        if perm & bit
    ]
    return f"{perm_string(perm)} ({', '.join(words) if words else 'no access'})"


def human_size(n: int) -> str:
    """Bytes in binary units, ``1073741824`` -> ``"1.0 GiB"``."""
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(size) < 1024 or unit == "TiB":
            return f"{int(size)} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"  # unreachable; keeps type checkers quiet
