"""Message ids (store-format.md §3.10): offset msgId and the client UNIQ_KEY."""

from __future__ import annotations

import datetime as dt
import ipaddress
import struct
from dataclasses import dataclass

from rmqstore.errors import InputError


@dataclass(frozen=True, slots=True)
class OffsetMsgId:
    store_host: str
    store_port: int
    phy_offset: int


def decode_offset_msg_id(msg_id: str) -> OffsetMsgId:
    """32 hex chars (IPv4 store host) or 56 (IPv6); raises InputError otherwise."""
    try:
        raw = bytes.fromhex(msg_id)
    except ValueError:
        raise InputError(f"message id {msg_id!r} is not hexadecimal") from None
    if len(raw) == 16:
        addr_len = 4
    elif len(raw) == 28:
        addr_len = 16
    else:
        raise InputError(f"message id {msg_id!r} has {len(msg_id)} hex digits; an offset msgId has 32 or 56")
    port, phy = struct.unpack_from(">iq", raw, addr_len)
    return OffsetMsgId(str(ipaddress.ip_address(raw[:addr_len])), port, phy)


@dataclass(frozen=True, slots=True)
class UniqKey:
    ip: str
    pid: int
    class_loader_hash: int
    month_ms: int  # ms since the start of the producer's month, unsigned
    counter: int

    def timestamp_ms(self, now_ms: int, tz: dt.tzinfo | None = None) -> int:
        """Guess the absolute time: this month, or the previous one if that would be in the future."""
        now = dt.datetime.fromtimestamp(now_ms / 1000, tz or dt.UTC)
        start = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
        t = int(start.timestamp() * 1000) + self.month_ms
        if t >= now_ms:
            prev = (start - dt.timedelta(days=1)).replace(day=1)
            t = int(prev.timestamp() * 1000) + self.month_ms
        return t


def decode_uniq_key(uniq_key: str) -> UniqKey:
    try:
        raw = bytes.fromhex(uniq_key)
    except ValueError:
        raise InputError(f"unique key {uniq_key!r} is not hexadecimal") from None
    if len(raw) not in (16, 28):
        raise InputError(f"unique key {uniq_key!r} has {len(uniq_key)} hex digits; expected 32 or 56")
    ip_len = 16 if len(raw) == 28 else 4
    pid, cl, t, cnt = struct.unpack_from(">HiIH", raw, ip_len)
    return UniqKey(str(ipaddress.ip_address(raw[:ip_len])), pid, cl, t, cnt)
