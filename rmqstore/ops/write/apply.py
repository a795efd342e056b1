"""Carrying out a write plan: the checks before it, the commit log, the dispatch, topics.json and the checkpoint."""

from __future__ import annotations

import hashlib
import operator
import os
import shlex
import shutil
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from rmqstore.codec import checkpoint as cpmod
from rmqstore.codec.indexfile import HEADER_SIZE as INDEX_HEADER_SIZE
from rmqstore.codec.indexfile import decode_header as decode_index_header
from rmqstore.codec.indexfile import header_problem
from rmqstore.codec.messages import BATCH_FIELDS, Message, MessageBatch, paused_gc
from rmqstore.dispatch.dispatcher import Dispatcher, DispatchStats
from rmqstore.dispatch.multiqueue import dispatch_extra
from rmqstore.errors import CorruptData, FileAccessError, InputError, RmqstoreError, UnsafePlan, from_os_error
from rmqstore.ops.write.append import WriteOptions, WritePlan
from rmqstore.ops.write.journal import (
    JOURNAL_FORMAT,
    RollbackReport,
    _commitlog_fingerprint,
    _finish_journal,
    _journal_path,
    _record_committed,
    _rollback,
    _zero_range,
    last_write,
    pending_journal,
    rel,
    rollback_pending,
    save_range,
)
from rmqstore.ops.write.plan import plan_blocks, plan_with
from rmqstore.ops.write.spill import SpilledPiece
from rmqstore.ops.write.validate import _load_topics
from rmqstore.safety.files import atomic_write, fsync_dir, scratch_dir
from rmqstore.safety.journal import Journal, StepHook
from rmqstore.safety.openfile import create_sized, open_fd, read_file
from rmqstore.safety.quarantine import Quarantine, default_quarantine_base
from rmqstore.store import Store, open_store
from rmqstore.store import config as cfgmod
from rmqstore.store.files import data_end, pwrite_all
from rmqstore.store.layout import StoreConfig
from rmqstore.walk.recovery import recovery_facts, refuse_unrecoverable


@dataclass(frozen=True, slots=True)
class WriteResult:
    plan: WritePlan
    dispatch: DispatchStats | None
    checkpoint: cpmod.Checkpoint | None  # written, or None when left alone
    abort_created: bool
    quarantine: Path | None
    rolled_back: RollbackReport | None = None
    flush: str = "sync"
    dry_run: bool = False

    def summary(self) -> dict[str, Any]:
        out = self.plan.summary()
        if self.dispatch is not None:
            out["cqEntries"] = self.dispatch.cq_entries
            out["indexEntries"] = self.dispatch.index_entries
            out["queues"] = len(self.dispatch.queues_touched)
            out["indexFilesCreated"] = [p.name for p in self.dispatch.index_files_created]
        out["checkpoint"] = self.checkpoint.to_json() if self.checkpoint else None
        out["abortCreated"] = self.abort_created
        out["quarantine"] = str(self.quarantine) if self.quarantine else None
        out["flush"] = self.flush
        if self.dry_run:
            out["dryRun"] = True
        if self.rolled_back is not None:
            out["rolledBackInterruptedWrite"] = str(self.rolled_back.journal)
        return out


def default_quarantine_dir(root: Path, now_ms: int | None = None) -> Path:
    """The base folder; each write that zeroes bytes gets a fresh ``write-<UTC time>`` folder inside."""
    return default_quarantine_base(root)


def input_digest(messages: Sequence[Message] | MessageBatch) -> str:
    """sha256 of input messages given as values (not of the encoded records: times and UNIQ_KEYs differ
    per run); an NDJSON input is hashed as read instead (``read_ndjson_stream``). Each column is fed
    to the hash as it is, lengths first, with no pickling."""
    h = hashlib.sha256()
    batch = messages if isinstance(messages, MessageBatch) else MessageBatch.from_messages(messages)
    if not isinstance(messages, MessageBatch):  # the fields a batch leaves out
        h.update(repr([_OTHER_FIELDS(m) for m in messages]).encode("utf-8", "surrogatepass"))
    for name in BATCH_FIELDS:
        if name == "origin":  # where the input came from, not what it says
            continue
        column = getattr(batch, name)
        if name == "body":
            h.update(repr(list(map(len, column))).encode())
            for body in column:
                h.update(body)
        else:
            if name == "properties" and column is not None:  # the NDJSON reader's dicts hash as their pairs
                column = [tuple(p.items()) if type(p) is dict else p for p in column]
            h.update(repr(column).encode("utf-8", "surrogatepass"))
    return h.hexdigest()


_OTHER_FIELDS = operator.attrgetter(
    *(f for f in Message.__slots__ if f not in BATCH_FIELDS)  # type: ignore[attr-defined]
)


def refuse_unsafe(st: Store, plan: WritePlan, digest: str | None) -> None:
    """Refuse a plan the store cannot take safely (see :func:`write_messages`); ``digest`` None skips
    the check for a repeated input."""
    if not plan.records:
        return
    if digest is not None:
        _refuse_repeat(st.root, digest, plan)
    _refuse_damage(st, plan)
    _refuse_damaged_index(st, plan)


def _refuse_repeat(root: Path, digest: str, plan: WritePlan) -> None:
    last = last_write(root)
    if last is None or last.get("inputDigest") != digest or last.get("endPhyOffset") != plan.start_phy:
        return
    raise UnsafePlan(
        f"{root}: this input was already written by the last write ({last.get('messages')} messages at phy offsets "
        f"[{last.get('startPhyOffset')}, {last.get('endPhyOffset')})); nothing was written: --again writes it a "
        "second time"
    )


def _refuse_damage(st: Store, plan: WritePlan) -> None:
    """The broker's recovery must keep every record before the append point, else it drops the new ones."""

    if plan.start_phy == 0:
        return
    last = last_write(st.root)
    if (
        last is not None
        and last.get("endPhyOffset") == plan.start_phy
        and last.get("commitlogAsLeft") == _commitlog_fingerprint(st.config.commitlog_dir)
    ):
        return  # the files are as the last write left them, after it checked them: no need to walk again
    refuse_unrecoverable(st)
    f = recovery_facts(st)
    if f.process_offset >= plan.start_phy:
        return
    fs = st.config.commitlog_file_size
    base = f.process_offset - f.process_offset % fs
    raise CorruptData(
        f"damaged commit log: the broker's recovery stops here ({f.stop}) and would drop everything after it, "
        f"the new messages included (they would go at {plan.start_phy}); run `rmqstore recover "
        f"{shlex.quote(str(st.root))}` first",
        path=st.config.commitlog_dir / f"{base:020d}",
        pos=f.process_offset - base,
        phy_offset=f.process_offset,
    )


def _refuse_damaged_index(st: Store, plan: WritePlan) -> None:
    """The dispatch appends to the last index file: its header must be one the broker could have written."""

    if not (plan.dispatch and st.config.message_index_enable):
        return
    files, _ = st.index_files()
    if not files:
        return
    last = files[-1]
    head = read_file(last, limit=INDEX_HEADER_SIZE)
    why = "shorter than its header" if len(head) < INDEX_HEADER_SIZE else None
    if why is None:
        why = header_problem(decode_index_header(head, path=str(last)), st.config.max_index_num)
    if why is not None:
        raise CorruptData(
            f"damaged index file ({why}): the write refuses to append to it; rebuild the index first "
            f"(`rmqstore redispatch --only index {shlex.quote(str(st.root))}`)",
            path=last,
            pos=0,
        )


def _quarantine(plan: WritePlan, base: Path, root: Path, now_ms: int) -> Path:
    s = plan.stale
    assert s is not None
    q = Quarantine.fresh(base, "write", root, now_ms)
    q.save_range(
        s.path,
        s.pos,
        s.pos + s.length,
        f"bytes after the end of valid commit log records (phy offset {s.phy_offset}), zeroed before appending; "
        "restoring them overwrites the messages this write appended there",
    )
    q.write_manifest()
    return q.folder


def _apply_commitlog(plan: WritePlan, cfg: StoreConfig, sync: bool) -> None:
    fs = cfg.commitlog_file_size
    if plan.stale is not None:
        _zero_range(plan.stale.path, plan.stale.pos, plan.stale.length)
    created = False
    for w in plan.writes:
        if w.create:
            cfg.commitlog_dir.mkdir(parents=True, exist_ok=True)
            create_sized(w.path, fs)
            created = True
        fd = open_fd(w.path, os.O_RDWR)
        try:
            if os.fstat(fd).st_size != fs:
                raise CorruptData(f"file is {os.fstat(fd).st_size} bytes, expected {fs}", path=w.path, pos=0)
            at = w.pos
            for piece in w.pieces:
                if isinstance(piece, SpilledPiece):
                    piece.write_to(fd, at)
                else:
                    pwrite_all(fd, piece, at)
                at += len(piece)
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)
    if created and sync:
        fsync_dir(cfg.commitlog_dir)


class _Background(threading.Thread):
    """``fn(*args)`` in a thread; :meth:`result` re-raises what it raised."""

    def __init__(self, fn: Callable[..., Any], *args: Any):
        super().__init__(name="rmqstore-commitlog-writer", daemon=True)
        self._call = (fn, args)
        self._error: BaseException | None = None
        self.start()

    def run(self) -> None:
        fn, args = self._call
        try:
            fn(*args)
        except BaseException as e:  # handed to the caller's thread
            self._error = e

    def result(self) -> None:
        if self._error is not None:
            raise self._error


def _dispatch_written(st: Store, plan: WritePlan, clock: Callable[[], int], sync: bool) -> DispatchStats:
    """Dispatch the records not yet dispatched, then the new ones (§9): consume queue entries and
    index keys, continuing the existing files exactly where the broker would."""
    disp = Dispatcher(st.config, clock=clock)
    try:
        if plan.catch_up:
            disp.dispatch(list(plan.catch_up))
        for columns in plan.records.batches():
            disp.dispatch_columns(columns)
    finally:
        stats = disp.close(sync=sync)
    return stats


def _fsync_created_dirs(st: Store, stats: DispatchStats | None) -> None:
    """Make new consume queue and index file names durable (the data was msynced by the dispatcher)."""
    if stats is None:
        return
    dirs = set()
    for topic, qid in stats.queues_touched:
        q = st.consume_queues.queue(topic, qid).directory
        dirs |= {q, q.parent, st.consume_queues.directory}
    if stats.index_files_created:
        dirs.add(st.config.index_dir)
    for d in sorted(dirs):
        if d.is_dir():
            fsync_dir(d)


def apply_write(
    st: Store,
    plan: WritePlan,
    *,
    flush: str = "sync",
    quarantine: Path | None = None,
    use_quarantine: bool = True,
    index_clock: Callable[[], int] | None = None,
    now_ms: int | None = None,
    on_step: StepHook | None = None,
    digest: str | None = None,
) -> WriteResult:
    """Carry out ``plan`` on the store it was made for (open writable), atomically.

    Journaled: the journal is written first and a kill before the commit point is rolled back by the
    next write; at the commit point the journal records the input ``digest`` and the offsets written,
    so a kill after it is finished (never undone, never written twice). ``on_step`` is called with
    ``write:journal``, ``write:data``, ``write:checkpoint``, ``write:commit`` and ``write:finished``.

    ``flush="sync"`` msyncs every changed file and directory before returning, ``"async"`` leaves
    write-back to the OS (a crash of the machine may then lose the tail, as with an async broker).

    Checkpoint (§6, §9.4.7): only with ``sync`` and when the store had no ``abort`` file (a crashed
    store keeps its old, earlier checkpoint so the broker's abnormal recovery still starts early enough):
    physicMsgTimestamp = max(old, store time of the last record written); logicsMsgTimestamp =
    max(old, store time behind the last consume queue entry written) and indexMsgTimestamp = max(old,
    end time of an index file that became full), both only after the dispatch flushed them; other
    fields kept. Every value then describes data already on disk. With ``async`` the checkpoint is left
    alone. ``dispatch=False`` creates ``abort`` (§9.4.6).

    Raises:
        RmqstoreError: any failure; the store is then rolled back to its state before the call.
    """
    if flush not in ("sync", "async"):
        raise InputError(f"--flush must be sync or async, not {flush!r}")
    if not st.writable:
        raise UnsafePlan(f"{st.root}: open the store writable to apply a write")
    if not plan.records:
        return WriteResult(plan, None, None, False, None, None, flush)
    cfg = st.config
    root = st.root
    now = now_ms if now_ms is not None else time.time_ns() // 1_000_000
    sync = flush == "sync"
    qdir = None
    if plan.stale is not None and not plan.stale.padding and use_quarantine:
        qdir = _quarantine(plan, quarantine or default_quarantine_dir(root), root, now)
    scratch_dir(root)
    journal = Journal(_journal_path(root), {"operation": "write", **_build_journal(st, plan)}, on_step)
    journal.save()
    abort_existed = cfg.abort_path.exists()
    try:
        stats, cp, abort_created = paused_gc(
            _apply_steps, st, plan, journal, now, sync, abort_existed, index_clock, digest
        )
    except BaseException as e:
        _roll_back_failed(root, qdir, e)
        raise
    journal.hook("write:commit")
    _record_committed(root, journal.data["committed"], cfg.commitlog_dir)
    _finish_journal(root)
    journal.hook("write:finished")
    return WriteResult(plan, stats, cp, abort_created, qdir, None, flush)


def _apply_steps(
    st: Store,
    plan: WritePlan,
    journal: Journal,
    now: int,
    sync: bool,
    abort_existed: bool,
    index_clock: Callable[[], int] | None,
    digest: str | None,
) -> tuple[DispatchStats | None, cpmod.Checkpoint | None, bool]:
    """The journaled steps up to the commit point: data, topics.json, checkpoint or abort."""
    cfg = st.config
    journal.mark("journal")
    stats = _write_data(st, plan, sync, index_clock or (lambda: now))
    journal.mark("data")
    if plan.new_topics:
        _add_topics(cfg, plan, now)
    cp = _write_checkpoint(st, plan, stats) if sync and not abort_existed else None
    abort_created = False
    if not plan.dispatch and not abort_existed:
        os.close(open_fd(cfg.abort_path, os.O_WRONLY | os.O_CREAT))
        abort_created = True
    if sync:
        _fsync_created_dirs(st, stats)
        fsync_dir(st.root)
    journal.mark("checkpoint")
    journal.data["committed"] = {
        "inputDigest": digest,
        "startPhyOffset": plan.start_phy,
        "endPhyOffset": plan.end_phy,
        "messages": len(plan.records),
        "finishedMs": now,
    }
    # the commit point: from here a re-run finishes this write instead of undoing it
    journal.save()
    return stats, cp, abort_created


def _write_data(st: Store, plan: WritePlan, sync: bool, index_clock: Callable[[], int]) -> DispatchStats | None:
    """The commit log, and the dispatch of the records (catch-up first)."""
    # the dispatch reads the plan, not the commit log: the commit log is written (and fsynced)
    # by a second thread meanwhile; pwrite and fsync release the GIL
    writer = _Background(_apply_commitlog, plan, st.config, sync)
    stats = None
    try:
        if plan.dispatch:
            stats = _dispatch_written(st, plan, index_clock, sync)
    finally:
        writer.join()  # never roll back under a running writer
    writer.result()
    if plan.dispatch and plan.lmq_queues:  # reads the records back: only once they are written
        for q in dispatch_extra(st, plan.start_phy, plan.end_phy):
            if stats is not None:
                stats.skipped.setdefault((q.name, q.queue_id), q)
    return stats


def _add_topics(cfg: StoreConfig, plan: WritePlan, now: int) -> None:
    _, cf = _load_topics(cfg)
    data = cf.data if isinstance(cf.data, dict) else {}
    for tc in plan.new_topics:
        cfgmod.set_topic(data, tc, now_ms=now, broker_version=cfg.broker)
    cfgmod.write_config(cfg.config_dir, "topics.json", data, broker_version=cfg.broker)


def _write_checkpoint(st: Store, plan: WritePlan, stats: DispatchStats | None) -> cpmod.Checkpoint:
    """Each time only moves forward, to data already on disk (see :func:`apply_write`)."""
    old = st.read_checkpoint() or cpmod.Checkpoint(0, 0, 0)
    logics = old.logics_msg_timestamp_ms
    index_ts = old.index_msg_timestamp_ms
    if stats is not None:
        logics = max(logics, stats.logics_msg_timestamp_ms)
        index_ts = max(index_ts, stats.index_msg_timestamp_ms)
    cp = replace(
        old,
        physic_msg_timestamp_ms=max(old.physic_msg_timestamp_ms, plan.last_store_timestamp_ms),
        logics_msg_timestamp_ms=logics,
        index_msg_timestamp_ms=index_ts,
    )
    atomic_write(st.config.checkpoint_path, cpmod.encode(cp), tmp_dir=scratch_dir(st.root))
    return cp


def _roll_back_failed(root: Path, qdir: Path | None, e: BaseException) -> None:
    """Undo a failed apply; an OS error is raised as one line saying what was done (the caller
    re-raises the rest). A rollback that fails too keeps the journal: the next write finishes it."""
    cause = from_os_error(e) if isinstance(e, OSError) else e
    j = pending_journal(root)
    try:
        if j is not None:
            _rollback(root, j)
            _finish_journal(root)
    except (OSError, RmqstoreError) as r:
        why = from_os_error(r) if isinstance(r, OSError) else r
        err = RmqstoreError(
            f"write failed ({cause}) and so did its rollback ({why}); nothing is lost: the journal "
            f"{_journal_path(root)} keeps what the write changed, and a re-run of `rmqstore write` on "
            f"{root} (once the cause is removed) finishes the rollback before it writes"
        )
        err.exit_code = getattr(cause, "exit_code", 1)
        raise err from e
    if qdir is not None:
        shutil.rmtree(qdir, ignore_errors=True)  # the bytes are back in place
    if isinstance(e, OSError | FileAccessError):
        err = RmqstoreError(
            f"write failed ({cause}); the store was rolled back (the commit log, consume queues, index and "
            "checkpoint are as before): run the write again once the cause is removed"
        )
        err.exit_code = getattr(cause, "exit_code", 1)
        raise err from e


def write_messages(
    root: Path | str,
    messages: Sequence[Message] | MessageBatch,
    *,
    broker_config: Path | str | None = None,
    broker: str | None = None,
    create: bool = False,
    flush: str = "sync",
    quarantine: Path | None = None,
    use_quarantine: bool = True,
    dry_run: bool = False,
    again: bool = False,
    on_step: StepHook | None = None,
    **options: Any,
) -> WriteResult:
    """Open ``root`` writable (the broker's lock), finish or roll back an interrupted write, plan and apply.

    ``dry_run`` opens the store read-only (still refusing one a broker holds) and only plans.
    Refused before anything is written: damage the broker's recovery would cut before the append
    point (CorruptData, run recover first), a damaged last index file, a record waiting for dispatch
    whose topic the broker never accepts, and the same input as the last write when nothing was
    written since (UnsafePlan unless ``again``). ``options``: those of :func:`plan_write`. See
    :func:`plan_write` and :func:`apply_write`.
    """
    if flush not in ("sync", "async"):
        raise InputError(f"flush must be sync or async, not {flush!r}")
    opts = WriteOptions(**options)
    clock = opts.clock
    with open_for_write(root, broker_config=broker_config, broker=broker, create=create, dry_run=dry_run) as st:
        plan, digest, rolled = prepare_write(st, messages, opts, again=again, dry_run=dry_run)
        if dry_run:
            return WriteResult(plan, None, None, False, None, None, flush, dry_run=True)
        res = apply_write(
            st,
            plan,
            flush=flush,
            quarantine=quarantine,
            use_quarantine=use_quarantine,
            index_clock=clock,
            now_ms=clock() if clock else None,
            on_step=on_step,
            digest=digest,
        )
    return replace(res, rolled_back=rolled) if rolled else res


@contextmanager
def open_for_write(
    root: Path | str,
    *,
    broker_config: Path | str | None = None,
    broker: str | None = None,
    create: bool = False,
    dry_run: bool = False,
) -> Iterator[Store]:
    """The store a write works on: open writable (the broker's lock), or for a dry run read-only but
    still refusing a store a broker holds. A root that ``create`` made is removed again when what
    runs inside fails (only its lock file and empty directories exist then)."""

    if dry_run:
        with open_store(root, broker_config=broker_config, broker=broker, operation="write", dry_run=True) as st:
            yield st
        return
    new_root = Path(root)
    created = create and not new_root.exists()
    try:
        with open_store(
            root, broker_config=broker_config, writable=True, broker=broker, create=create, operation="write"
        ) as st:
            yield st
    except BaseException:
        if created:
            _remove_new_root(new_root)
        raise


def prepare_write(
    st: Store,
    messages: Sequence[Message] | MessageBatch,
    opts: WriteOptions,
    *,
    again: bool,
    dry_run: bool,
    digest: str | None = None,
) -> tuple[WritePlan, str, RollbackReport | None]:
    """Roll back (or finish) an interrupted write unless ``dry_run``, plan ``messages`` and refuse an
    unsafe plan (see :func:`write_messages`): the plan, the input's digest (``digest`` when given, the
    hash of the input bytes as read) and the rollback done."""
    rolled = None if dry_run else rollback_pending(st)
    plan = plan_with(st, messages, opts)
    if digest is None:
        digest = input_digest(messages)
    refuse_unsafe(st, plan, None if again else digest)
    return plan, digest, rolled


def prepare_write_blocks(
    st: Store,
    blocks: Iterable[Sequence[Message] | MessageBatch],
    digest: Any,
    opts: WriteOptions,
    *,
    again: bool,
    dry_run: bool,
) -> tuple[WritePlan, str, RollbackReport | None]:
    """:func:`prepare_write` of messages read a block at a time while the plan is made (the NDJSON
    reader's blocks); ``digest`` is the hash the reader feeds with the bytes it reads."""
    rolled = None if dry_run else rollback_pending(st)
    plan = plan_blocks(st, blocks, opts)
    hexdigest: str = digest.hexdigest()
    refuse_unsafe(st, plan, None if again else hexdigest)
    return plan, hexdigest, rolled


def _remove_new_root(root: Path) -> None:
    """Undo ``--create`` after a failed first write: only the lock file and empty directories exist."""
    files = [p for p in root.rglob("*") if not p.is_dir()]
    if all(p == root / "lock" and p.stat().st_size == 0 for p in files):
        shutil.rmtree(root, ignore_errors=True)


def _build_journal(st: Store, plan: WritePlan) -> dict[str, Any]:
    """Record the state a rollback restores; copies the non-zero bytes the write may overwrite."""
    cfg = st.config
    root = st.root
    fs = cfg.commitlog_file_size
    cl_names = sorted(n for n in os.listdir(cfg.commitlog_dir) if n.isdigit()) if cfg.commitlog_dir.is_dir() else []
    zero_to = plan.end_phy
    backups: list[dict[str, Any]] = []
    if plan.stale is not None:
        s = plan.stale
        zero_to = max(zero_to, s.phy_offset + s.length)
        backups.append(
            {"path": str(s.path), "pos": s.pos, "file": save_range(root, s.path, s.pos, s.length, "commitlog")}
        )
    queues: list[dict[str, Any]] = []
    if plan.dispatch:
        keys = plan.records.queues()
        keys |= {(r.topic, r.queue_id) for r in plan.catch_up}
        keys |= set(plan.lmq_queues)  # the %LMQ% entries are rolled back with the rest
        for topic, qid in sorted(keys):
            q = st.consume_queues.queue(topic, qid)
            segs, _ = q.files()
            entry: dict[str, Any] = {
                "dir": rel(root, q.directory),
                "existing": [s.path.name for s in segs],
                "last": None,
            }
            tail = q.tail()
            if tail.file is not None:
                last = tail.file
                end = tail.end - last.base_offset
                entry["last"] = last.path.name
                entry["end"] = end
                nz = data_end(last.path, end, last.size)
                if nz > end:
                    entry["tail"] = save_range(root, last.path, end, nz - end, "cq")
            queues.append(entry)
    index: dict[str, Any] = {"tracked": plan.dispatch and cfg.message_index_enable, "existing": [], "last": None}
    if index["tracked"]:
        files, _ = st.index_files()
        index["existing"] = [p.name for p in files]
        if files:
            last = files[-1]
            slots_end = INDEX_HEADER_SIZE + cfg.max_hash_slot_num * 4
            index["last"] = last.name
            index["head"] = save_range(root, last, 0, slots_end, "index")  # header and hash slots
            head = read_file(last, limit=INDEX_HEADER_SIZE)
            count = max(decode_index_header(head, path=str(last)).index_count, 1)
            entries_from = slots_end + count * 20
            index["entriesFrom"] = entries_from
            nz = data_end(last, entries_from, last.stat().st_size)
            if nz > entries_from:
                index["entriesTail"] = save_range(root, last, entries_from, nz - entries_from, "index-tail")
    saved_files: list[dict[str, Any]] = []
    for p in (cfg.config_dir / "topics.json", cfg.config_dir / "topics.json.bak", cfg.checkpoint_path):
        item: dict[str, Any] = {"path": rel(root, p), "existed": p.exists()}
        if item["existed"]:
            item["file"] = save_range(root, p, 0, p.stat().st_size, "file")
        saved_files.append(item)
    dirs = {rel(root, d): d.is_dir() for d in (cfg.commitlog_dir, cfg.consumequeue_dir, cfg.index_dir, cfg.config_dir)}
    return {
        "format": JOURNAL_FORMAT,
        "pid": os.getpid(),
        "startedMs": time.time_ns() // 1_000_000,
        "commitlog": {
            "dir": str(cfg.commitlog_dir),
            "fileSize": fs,
            "existing": cl_names,
            "zeroFrom": plan.start_phy,
            "zeroTo": zero_to,
            "backups": backups,
        },
        "queues": queues,
        "index": index,
        "files": saved_files,
        "dirsExisted": dirs,
        "abortExisted": cfg.abort_path.exists(),
    }
