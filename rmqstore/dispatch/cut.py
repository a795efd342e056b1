"""Cutting a store back at a commit log offset: the dispatch undone (store-format.md §2.4, §4.4, §5, §6, §8.5).

What ``recover`` removes after a torn tail and what ``truncate`` removes at an offset the operator
chose are the same cuts: the commit log's tail zeroed and the files after it deleted (with the
records they held, decoded for the plan), consume queue and batch consume queue units pointing at
or past the offset, index entries at or past it, and the checkpoint brought back inside the kept
records. Each cut is planned as a :class:`Removal` (reads only) and carried out by the functions
below, every one idempotent so a journaled step can run again after a kill.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rmqstore.codec import checkpoint as cpmod
from rmqstore.codec import dledger as dl
from rmqstore.codec import indexfile as ix
from rmqstore.codec.commitlog import MIN_RECORD_SIZE_V1, Record, decode_record, offset_msg_id, torn_head
from rmqstore.errors import CorruptData
from rmqstore.safety.files import atomic_write, fsync_dir, scratch_dir, unlink_if_present, zero_range
from rmqstore.safety.openfile import open_fd
from rmqstore.safety.plan import JsonModel
from rmqstore.store.dledger import read_member
from rmqstore.store.files import data_end, map_file
from rmqstore.store.layout import Segment, StoreConfig, list_segments
from rmqstore.store.queue.interface import QueueCut
from rmqstore.store.reader import CommitLogReader
from rmqstore.walk.chain import StopKind, frames
from rmqstore.walk.recovery import LostRecord, rel_path

LOST_LIST_LIMIT = 1000  # records listed per removed range; the rest are counted


@dataclass(frozen=True, slots=True)
class Removal(JsonModel):
    """One removal: zero a byte range of a file, delete a whole file, or rewrite an index file without
    its entries from ``from_pos`` on."""

    json_keys = (
        "step verb=action kind path from_pos=from to_pos=to size=bytes why records_total entries_total "
        "undecodable_size=undecodableBytes records"
    )

    step: str  # the journal step that carries it out
    verb: str  # "zero" | "delete" | "rewrite"
    kind: str  # "commitlog" | "consumequeue" | "index"
    path: str  # relative to the store root when inside it, else absolute
    from_pos: int  # first byte removed (0 for a delete)
    to_pos: int  # end of the non-zero bytes removed (the file size for a delete)
    why: str
    records: tuple[LostRecord, ...] = ()  # commit log records removed (at most LOST_LIST_LIMIT)
    records_total: int = 0
    entries_total: int = 0  # consume queue or index entries removed
    undecodable_size: int = 0  # bytes that are not whole records (torn, garbage)

    @property
    def size(self) -> int:
        return self.to_pos - self.from_pos


def in_store(root: Path, rel: str) -> Path:
    return Path(root) / rel  # an absolute ``rel`` stays absolute


# -- the commit log ----------------------------------------------------------------------------


def _partial_record(buf: Any, pos: int, end: int, base: int) -> LostRecord | None:
    """Whatever a torn record's fixed header still says (queue, offsets, time, store host)."""
    head = torn_head(buf, pos, end)
    if head is None:
        return None
    total, qid, qoff, ts, addr, port = head
    return LostRecord(base + pos, total, None, qid, qoff, None, None, offset_msg_id(addr, port, base + pos), ts, True)


def _lost_record(rec: Record, base: int) -> LostRecord:
    return LostRecord(
        base + rec.pos,
        rec.total_size,
        rec.topic,
        rec.queue_id,
        rec.queue_offset,
        rec.keys,
        rec.uniq_key,
        rec.msg_id,
        rec.store_timestamp_ms,
    )


def _with_torn(
    out: list[LostRecord], count: int, buf: Any, pos: int, end: int, base: int
) -> tuple[list[LostRecord], int]:
    """The removed records listed and counted so far, with the torn one at ``pos`` if its head is readable."""
    part = _partial_record(buf, pos, end, base)
    return (out + [part], count + 1) if part is not None else (out, count)


def decode_removed(buf: Any, seg: Segment, start: int, end: int, broker: str) -> tuple[list[LostRecord], int, int]:
    """Records in ``buf[start:end]`` (listed up to the limit, all counted), and undecodable bytes."""
    out: list[LostRecord] = []
    count = 0
    for run in frames(buf, seg, start, end):
        listed = min(len(run.records), LOST_LIST_LIMIT - len(out))
        for i, at in enumerate(run.records[:listed].tolist()):
            try:
                rec = decode_record(buf, at, path=str(seg.path), file_from=seg.base_offset, end=end, broker=broker)
            except CorruptData:
                return *_with_torn(out, count, buf, at, end, seg.base_offset), end - run.frame(i)
            if not isinstance(rec, Record):
                return out, count, 0
            out.append(_lost_record(rec, seg.base_offset))
            count += 1
        short = np.flatnonzero(run.ends[listed:] - run.records[listed:] < MIN_RECORD_SIZE_V1)
        if short.size:  # too small to be a record: the rest cannot be read as records
            return out, count + int(short[0]), end - run.frame(listed + int(short[0]))
        count += len(run.records) - listed
        if run.stop is not None and run.stop.kind is StopKind.INVALID:  # a frame cut short, or not a frame
            if len(out) < LOST_LIST_LIMIT:
                out, count = _with_torn(out, count, buf, run.stop.pos + seg.framing.head, end, seg.base_offset)
            return out, count, end - run.stop.pos
    return out, count, 0


def commitlog_cuts(
    root: Path, segs: Sequence[Segment], offset: int, broker: str, *, mark: str, stop: str | None = None
) -> list[Removal]:
    """``truncateDirtyFiles(offset)`` on the commit log (§8.5): the tail of the file holding ``offset``
    zeroed, later files deleted, with the records they drop. ``mark`` names the offset in the reasons."""
    out = []
    for s in segs:
        if s.base_offset + s.size <= offset:
            continue
        rel = rel_path(root, s.path)
        with map_file(s.path) as buf:
            if offset >= s.base_offset:
                cut = offset - s.base_offset
                end = data_end(s.path, cut)
                if end > cut:
                    recs, count, undec = decode_removed(buf, s, cut, end, broker)
                    why = f"after {mark}" + (f" ({stop})" if stop else "")
                    out.append(
                        Removal(
                            "commitlog-truncate", "zero", "commitlog", rel, cut, end, why, tuple(recs), count, 0, undec
                        )
                    )
            else:
                end = data_end(s.path, 0)
                recs, count, undec = decode_removed(buf, s, 0, end, broker) if end else ([], 0, 0)
                why = ("all zeros (pre-allocated), " if end == 0 else "") + f"starts past {mark}"
                out.append(
                    Removal(
                        "commitlog-truncate", "delete", "commitlog", rel, 0, s.size, why, tuple(recs), count, 0, undec
                    )
                )
    return out


def _carry_out(root: Path, removals: Sequence[Removal], zero: Callable[[Path, Removal], bool]) -> None:
    """Delete the files of ``removals`` and zero the others with ``zero`` (True: it deleted files beside)."""
    dirs: set[Path] = set()
    for a in removals:
        p = in_store(root, a.path)
        if a.verb == "delete":
            if unlink_if_present(p):
                dirs.add(p.parent)
        elif p.exists() and zero(p, a):
            dirs.add(p.parent)
    for d in dirs:
        fsync_dir(d)


def _zero_planned(p: Path, a: Removal) -> bool:
    zero_range(p, a.from_pos, a.to_pos)
    return False


def remove(root: Path, removals: Sequence[Removal]) -> None:
    """Zero the ranges and delete the files of ``removals`` (again after a kill: the same end state)."""
    _carry_out(root, removals, _zero_planned)


# -- consume queues ----------------------------------------------------------------------------


def queue_removal(root: Path, step: str, c: QueueCut, why: str) -> Removal:
    return Removal(
        step, c.verb, "consumequeue", rel_path(root, c.path), c.from_pos, c.to_pos, why, entries_total=c.units
    )


def _zero_queue_tail(p: Path, a: Removal) -> bool:
    zero_range(p, a.from_pos, data_end(p, a.from_pos))
    later = [x for x in list_segments(p.parent, None)[0] if x.base_offset > int(p.name)]
    return any([unlink_if_present(x.path) for x in later])


def cut_queue_tails(root: Path, removals: Sequence[Removal]) -> None:
    """``truncateDirtyLogicFiles``: the planned queue files deleted, and in the file that stays every unit
    from the cut on zeroed with the files after it gone (whatever was appended after the plan too)."""
    _carry_out(root, removals, _zero_queue_tail)


# -- index files (§5) --------------------------------------------------------------------------


def index_cuts(root: Path, cfg: StoreConfig, files: Sequence[Path], offset: int, *, step: str) -> list[Removal]:
    """Index files holding entries at or past ``offset``: deleted when their first entry is, else
    rewritten without the entries from the first such one on (entries follow the commit log order)."""
    out = []
    for p in files:
        with map_file(p) as buf:
            f = ix.IndexFile(buf, slots=cfg.max_hash_slot_num, entries=cfg.max_index_num, path=str(p))
            h = f.header()
            if h.index_count <= 1 or h.end_phy_offset < offset:
                continue
            phy = f.entries_array()["phy_offset"][1:]
            first = int(np.flatnonzero(phy >= offset)[0]) + 1 if (phy >= offset).any() else h.index_count
        rel = rel_path(root, p)
        removed = h.index_count - first
        if first <= 1:
            why = f"every entry points at or past {offset}"
            out.append(Removal(step, "delete", "index", rel, 0, p.stat().st_size, why, entries_total=removed))
            continue
        at = ix.HEADER_SIZE + cfg.max_hash_slot_num * 4
        why = f"entries {first}..{h.index_count - 1} point at or past {offset}: slots, header and entries rewritten"
        out.append(
            Removal(
                step,
                "rewrite",
                "index",
                rel,
                at + first * ix.ENTRY_SIZE,
                at + h.index_count * ix.ENTRY_SIZE,
                why,
                entries_total=removed,
            )
        )
    return out


def cut_index_file(path: Path, cfg: StoreConfig, offset: int, reader: CommitLogReader, tmp_root: Path) -> None:
    """Rewrite an index file without its entries at or past ``offset`` (temp file, fsync, rename): each
    slot back to the entry it held before, the header's end at the last kept entry and its record's
    store time. Running it on a file already cut changes nothing."""
    tmp = scratch_dir(tmp_root, "tmp") / f".{path.name}.{os.getpid()}.cut"
    shutil.copyfile(path, tmp)
    with map_file(tmp, write=True) as buf:
        f = ix.IndexFile(buf, slots=cfg.max_hash_slot_num, entries=cfg.max_index_num, path=str(path), broker=cfg.broker)
        h = f.header()
        entries = f.entries_array()
        phy = entries["phy_offset"]
        later = np.flatnonzero(phy[1:] >= offset)
        first = int(later[0]) + 1 if later.size else max(h.index_count, 1)
        if first > 1:
            last_ts = reader.read(int(phy[first - 1])).store_timestamp_ms
            f.remove_entries_from(first, last_ts)
        del entries, phy
        buf.flush()  # type: ignore[union-attr]
    fd = open_fd(tmp)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(path.parent)


# -- the DLedger member (DLedger mode) --------------------------------------------------------


def first_entry_at(cfg: StoreConfig, offset: int) -> int | None:
    """The index of the first DLedger entry at or past data offset ``offset`` (from the index units),
    None when every entry is before it."""
    index_files, _ = list_segments(cfg.dledger_index_dir, None)
    for seg in index_files:
        with map_file(seg.path) as buf:
            units = np.frombuffer(buf, dtype=_UNIT_DTYPE, count=len(buf) // dl.INDEX_UNIT_SIZE)
            hit = np.flatnonzero((units["magic"] != 0) & (units["pos"] >= offset))
            found = int(units["index"][hit[0]]) if hit.size else None
            del units
        if found is not None:
            return found
    return None


_UNIT_DTYPE = np.dtype([("magic", ">i4"), ("pos", ">i8"), ("size", ">i4"), ("index", ">i8"), ("term", ">i8")])


def dledger_cuts(
    root: Path, cfg: StoreConfig, offset: int, *, step: str
) -> tuple[list[Removal], dict[str, str] | None]:
    """The DLedger index units of the entries at or past ``offset`` (files after the one holding the first
    deleted, its tail zeroed), and the member checkpoint with ``endIndex`` and ``committedIndex`` no
    later than the last kept entry (None when it needs no change)."""
    first = first_entry_at(cfg, offset)
    if first is None:
        return [], None
    out = []
    cut_at = first * dl.INDEX_UNIT_SIZE
    for seg in list_segments(cfg.dledger_index_dir, None)[0]:
        rel = rel_path(root, seg.path)
        if seg.base_offset >= cut_at:
            why = f"index units of DLedger entries from {first} on (at or past {offset})"
            out.append(Removal(step, "delete", "dledger-index", rel, 0, seg.size, why))
        elif seg.base_offset + seg.size > cut_at:
            end = data_end(seg.path, cut_at - seg.base_offset)
            if end > cut_at - seg.base_offset:
                why = f"index units of DLedger entries from {first} on (at or past {offset})"
                out.append(Removal(step, "zero", "dledger-index", rel, cut_at - seg.base_offset, end, why))
    member = read_member(cfg)
    values = dict(member.checkpoint.values or {})
    after = dict(values)
    for key in ("endIndex", "committedIndex"):
        n = member.checkpoint.number(key)
        if n is not None and n > first - 1:
            after[key] = str(first - 1)
    return out, (after if after != values else None)


def write_member_checkpoint(cfg: StoreConfig, values: dict[str, str], tmp_root: Path) -> None:
    """The DLedger member checkpoint and its ``.bak`` (which DLedger reads when the file is missing)."""
    data = dl.encode_member_file(values)
    path = cfg.dledger_checkpoint_path
    for p in (path.with_name(path.name + ".bak"), path):
        atomic_write(p, data, tmp_dir=scratch_dir(tmp_root, "tmp"))


# -- the checkpoint (§6) -----------------------------------------------------------------------


def checkpoint_values(cp: cpmod.Checkpoint) -> dict[str, int]:
    return {
        "physicMsgTimestamp": cp.physic_msg_timestamp_ms,
        "logicsMsgTimestamp": cp.logics_msg_timestamp_ms,
        "indexMsgTimestamp": cp.index_msg_timestamp_ms,
    }


def checkpoint_bytes(before: bytes | None, after: dict[str, int]) -> bytes:
    """What the broker's shutdown flush leaves: the three timestamps (5.1.1+: and the confirm offset)
    over the old page (§6); 5.x ``masterFlushedOffset`` when given."""
    page = cpmod.encode_timestamps(
        before, after["physicMsgTimestamp"], after["logicsMsgTimestamp"], after["indexMsgTimestamp"]
    )
    if "confirmPhyOffset" in after:
        page = cpmod.with_confirm_offset(page, after["confirmPhyOffset"])
    if "masterFlushedOffset" in after:
        page = cpmod.with_master_flushed_offset(page, after["masterFlushedOffset"])
    return page
