"""Index files (store-format.md §5): a fixed hash table with per-slot chains of entries.

``IndexFile`` works over any writable buffer (an ``mmap`` of the file or a ``bytearray``) and
implements the broker's ``putKey`` and ``selectPhyOffset`` exactly, including the 4.4.0-4.7.0
hashSlotCount rule and the first-entry time-diff quirk.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

from rmqstore.codec.fields import INT_MAX, Field, lazy_dtypes, struct_of, table
from rmqstore.codec.javahash import index_key_hash
from rmqstore.errors import CorruptData
from rmqstore.rules import rules_for

# §5.1: the header, a slot and an entry, each declared once; structs and dtypes derive from them.
HEADER_FIELDS = table(
    """
    begin_timestamp_ms  q  beginTimestamp
    end_timestamp_ms    q  endTimestamp
    begin_phy_offset    q  beginPhyOffset
    end_phy_offset      q  endPhyOffset
    hash_slot_count     i  hashSlotCount
    index_count         i  indexCount
    """
)
SLOT_FIELDS = (Field("slot", "slot value (last entry number)", "i"),)
ENTRY_FIELDS = table(
    """
    key_hash    i  keyHash
    phy_offset  q  phyOffset
    time_diff   i  timeDiff (s)
    prev        i  prevIndex
    """
)
HEADER = struct_of(HEADER_FIELDS)
HEADER_SIZE = HEADER.size  # 40
_SLOT = struct_of(SLOT_FIELDS)
_ENTRY = struct_of(ENTRY_FIELDS)
ENTRY_SIZE = _ENTRY.size  # 20
DEFAULT_SLOTS = 5_000_000
DEFAULT_ENTRIES = 20_000_000


def file_size(slots: int, entries: int) -> int:
    return HEADER_SIZE + slots * 4 + entries * ENTRY_SIZE


@dataclass(frozen=True, slots=True)
class IndexHeader:
    begin_timestamp_ms: int
    end_timestamp_ms: int
    begin_phy_offset: int
    end_phy_offset: int  # start of the last indexed record
    hash_slot_count: int
    index_count: int  # next entry number; 1 (or 0 on disk) when empty

    @property
    def entry_count(self) -> int:
        return max(self.index_count, 1) - 1


@dataclass(frozen=True, slots=True)
class IndexEntry:
    number: int
    key_hash: int
    phy_offset: int
    time_diff_s: int
    prev: int


def decode_header(buf: Any, *, path: str = "<buffer>") -> IndexHeader:
    if len(buf) < HEADER_SIZE:
        raise CorruptData(f"index file shorter than its {HEADER_SIZE}-byte header", path=path, pos=0)
    return IndexHeader(*HEADER.unpack_from(buf, 0))


def write_header(buf: Any, h: IndexHeader) -> None:
    """Write ``h`` over the first 40 bytes of ``buf`` (an index file's mapping)."""
    HEADER.pack_into(buf, 0, *(getattr(h, f.name) for f in HEADER_FIELDS))


def encode_header(h: IndexHeader) -> bytes:
    return HEADER.pack(*(getattr(h, f.name) for f in HEADER_FIELDS))


def counts_new_slots_only(broker: str) -> bool:
    """hashSlotCount counts every put up to 4.7.0, only newly used slots since 4.7.1 (§5.2)."""
    return rules_for(broker).index_counts_new_slots_only


def is_time_matched(h: IndexHeader, begin_ms: int, end_ms: int) -> bool:
    """The broker's ``isTimeMatched`` (§5.4)."""
    return (
        (begin_ms < h.begin_timestamp_ms and end_ms > h.end_timestamp_ms)
        or (h.begin_timestamp_ms <= begin_ms <= h.end_timestamp_ms)
        or (h.begin_timestamp_ms <= end_ms <= h.end_timestamp_ms)
    )


class IndexFile:
    """One index file held in a writable or read-only buffer."""

    def __init__(self, buf: Any, *, slots: int, entries: int, path: str = "<buffer>", broker: str = "4.4.0"):
        if len(buf) != file_size(slots, entries):
            raise CorruptData(
                f"index file is {len(buf)} bytes, expected {file_size(slots, entries)} for "
                f"maxHashSlotNum={slots} maxIndexNum={entries}",
                path=path,
                pos=0,
            )
        self.buf = buf
        self.slots = slots
        self.max_entries = entries
        self.path = path
        self.broker = broker
        self._entries_pos = HEADER_SIZE + slots * 4

    # -- header ---------------------------------------------------------------
    def header(self) -> IndexHeader:
        return decode_header(self.buf, path=self.path)

    def write_header(self, h: IndexHeader) -> None:
        write_header(self.buf, h)

    def is_full(self) -> bool:
        return self.header().index_count >= self.max_entries

    # -- slots and entries ------------------------------------------------------
    def slot_of(self, key_hash: int) -> int:
        return key_hash % self.slots

    def slot_value(self, slot: int) -> int:
        return _SLOT.unpack_from(self.buf, HEADER_SIZE + slot * 4)[0]

    def entry(self, n: int) -> IndexEntry:
        pos = self._entries_pos + n * ENTRY_SIZE
        if not 0 <= n < self.max_entries:  # a damaged slot, prev link or indexCount points outside the file
            raise CorruptData(f"index entry number {n} outside 0..{self.max_entries - 1}", path=self.path, pos=pos)
        return IndexEntry(n, *_ENTRY.unpack_from(self.buf, pos))

    def entries_array(self) -> np.ndarray:
        """Zero-copy view of entries 0 .. indexCount-1 (entry 0 is never used)."""
        count = max(self.header().index_count, 1)
        import numpy as np

        return np.frombuffer(self.buf, dtype=__getattr__("ENTRY_DTYPE"), count=count, offset=self._entries_pos)

    def slots_array(self) -> np.ndarray:
        import numpy as np

        return np.frombuffer(self.buf, dtype=">i4", count=self.slots, offset=HEADER_SIZE)

    # -- broker algorithms ------------------------------------------------------
    def put_key(self, key: str, phy_offset: int, store_timestamp_ms: int) -> bool:
        """``IndexFile.putKey`` (§5.2); False when the file is full."""
        return self.put_hash(index_key_hash(key), phy_offset, store_timestamp_ms)

    def put_hash(self, key_hash: int, phy_offset: int, store_timestamp_ms: int) -> bool:
        h = self.header()
        index_count = max(h.index_count, 1)
        if index_count >= self.max_entries:
            return False
        slot_pos = HEADER_SIZE + (key_hash % self.slots) * 4
        (old,) = _SLOT.unpack_from(self.buf, slot_pos)
        if old <= 0 or old > index_count:
            old = 0
        diff = store_timestamp_ms - h.begin_timestamp_ms
        diff = int(diff / 1000) if diff >= 0 else -((-diff) // 1000)  # Java truncation toward zero
        if h.begin_timestamp_ms <= 0:
            diff = 0
        elif diff > INT_MAX:
            diff = INT_MAX
        elif diff < 0:
            diff = 0
        _ENTRY.pack_into(self.buf, self._entries_pos + index_count * ENTRY_SIZE, key_hash, phy_offset, diff, old)
        _SLOT.pack_into(self.buf, slot_pos, index_count)
        begin_ts, begin_phy = h.begin_timestamp_ms, h.begin_phy_offset
        if index_count <= 1:
            begin_phy, begin_ts = phy_offset, store_timestamp_ms
        slot_count = h.hash_slot_count
        if old == 0 or not counts_new_slots_only(self.broker):
            slot_count += 1
        self.write_header(IndexHeader(begin_ts, store_timestamp_ms, begin_phy, phy_offset, slot_count, index_count + 1))
        return True

    def remove_entries_from(self, first: int, end_timestamp_ms: int) -> None:
        """Undo ``putKey`` for entries ``first`` .. indexCount-1, newest first (``first`` >= 2): each slot
        gets back the entry it held before (the removed entry's prevIndex), hashSlotCount loses what those
        puts added, the entries are zeroed, and the header ends at entry ``first - 1`` stored at
        ``end_timestamp_ms`` (the entries keep only seconds since the begin time)."""
        import numpy as np

        h = self.header()
        count = max(h.index_count, 1)
        if not 2 <= first < count:
            return
        entries = self.entries_array()
        gone = entries[first:count]
        slots = self.slots_array()
        slot = gone["key_hash"].astype(np.int64) % self.slots
        # the oldest removed entry of a slot holds what the slot held before any of them
        uniq, oldest = np.unique(slot, return_index=True)
        restored = gone["prev"][oldest].astype(np.int64)
        added = len(gone) if not counts_new_slots_only(self.broker) else int((gone["prev"] == 0).sum())
        end_phy = int(entries["phy_offset"][first - 1])
        del entries, gone, slots
        view = np.frombuffer(self.buf, dtype=">i4", count=self.slots, offset=HEADER_SIZE)
        view[uniq] = restored
        del view
        tail = np.frombuffer(
            self.buf, np.uint8, count=(count - first) * ENTRY_SIZE, offset=self._entries_pos + first * ENTRY_SIZE
        )
        tail[:] = 0
        del tail
        self.write_header(
            IndexHeader(
                h.begin_timestamp_ms,
                end_timestamp_ms,
                h.begin_phy_offset,
                end_phy,
                max(0, h.hash_slot_count - added),
                first,
            )
        )

    def select_phy_offsets(
        self, key: str, *, max_num: int, begin_ms: int, end_ms: int, found: list[int] | None = None
    ) -> list[int]:
        """``selectPhyOffset`` (§5.4): compares hashes and the time window only."""
        out: list[int] = [] if found is None else found
        h = self.header()
        key_hash = index_key_hash(key)
        slot_value = self.slot_value(key_hash % self.slots)
        if slot_value <= 0 or slot_value > h.index_count or h.index_count <= 1:
            return out
        n = slot_value
        seen = 0
        while len(out) < max_num:
            e = self.entry(n)
            if e.time_diff_s < 0:
                break
            t = h.begin_timestamp_ms + e.time_diff_s * 1000
            if e.key_hash == key_hash and begin_ms <= t <= end_ms:
                out.append(e.phy_offset)
            prev = e.prev
            if prev <= 0 or prev > h.index_count or prev == n or t < begin_ms:
                break
            n = prev
            seen += 1
            if seen > self.max_entries:  # a corrupt cycle: the broker would spin; we stop
                raise CorruptData(f"index chain cycle at entry {n}", path=self.path, pos=self._entries_pos + n * 20)
        return out


def new_index_header_after(previous: IndexHeader | None) -> IndexHeader:
    """Header of a file created after ``previous`` filled up (§5.2 subtleties)."""
    if previous is None:
        return IndexHeader(0, 0, 0, 0, 0, 0)
    return IndexHeader(
        previous.end_timestamp_ms, previous.end_timestamp_ms, previous.end_phy_offset, previous.end_phy_offset, 0, 0
    )


# the numpy dtypes (SLOT_DTYPE, ENTRY_DTYPE), built on first use
__getattr__ = lazy_dtypes(SLOT_DTYPE=SLOT_FIELDS, ENTRY_DTYPE=ENTRY_FIELDS)


def header_problem(h: IndexHeader, max_index_num: int) -> str | None:
    """Why a header cannot belong to an index file holding at most ``max_index_num`` entries (None when plausible)."""
    if h.index_count < 0 or h.index_count > max_index_num:
        return f"indexCount {h.index_count} outside 0..{max_index_num}"
    if h.hash_slot_count < 0 or h.hash_slot_count > max(h.index_count, 1):
        return f"hashSlotCount {h.hash_slot_count} outside 0..indexCount"
    if h.index_count > 1:
        if h.begin_phy_offset < 0 or h.end_phy_offset < h.begin_phy_offset:
            return f"phy offsets {h.begin_phy_offset}..{h.end_phy_offset} out of order"
        if h.begin_timestamp_ms <= 0 or h.end_timestamp_ms < h.begin_timestamp_ms:
            return f"timestamps {h.begin_timestamp_ms}..{h.end_timestamp_ms} out of order"
    return None
