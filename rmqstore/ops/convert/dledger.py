"""Convert between a DLedger commit log and a plain one, into a new store directory.

``--to commitlog``: every record of a DLedger store (a migrated store's old ``commitlog/`` part
first) goes into a plain commit log, at new offsets; ``--to dledger``: every record of a plain store
goes into the entries of a single DLedger member (index from 0, one term), with its index files and
member files. Either way consume queues and index files are dispatched again from the new log,
the checkpoint follows, ``config/`` is copied as it is, and ``msgid-map.ndjson`` beside the new
store pairs every old message id with the new one (offset ids name the offset).

The source is only read. The new store is built in a hidden folder beside ``--output`` under a
journal and renamed onto it as the last step, so a killed run never leaves a store that looks
complete: running the same command again finishes it.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from rmqstore.codec import checkpoint as cpmod
from rmqstore.codec.commitlog import store_timestamp_at
from rmqstore.codec.dledger import DEFAULT_INDEX_FILE_SIZE, encode_member_file
from rmqstore.codec.framing import PLAIN
from rmqstore.dispatch.rebuild import build
from rmqstore.errors import CorruptData, InputError, UnsafePlan
from rmqstore.rules import rules_for
from rmqstore.safety.actions import PlannedAction
from rmqstore.safety.files import SCRATCH_DIR, atomic_write, fsync_dir, read_if_present
from rmqstore.safety.journal import Journal, StepHook, pending
from rmqstore.safety.plan import JsonModel
from rmqstore.store import Store, commitlog_framing, locked_error
from rmqstore.store.dledger import read_member
from rmqstore.store.layout import StoreConfig
from rmqstore.walk.lenient import BlankEnd, Damage, DataEnd, Run, walk_files

from .layout import IndexUnits, LogWriter, OffsetMap, msgid_lines, records_of

COMMITLOG, DLEDGER = "commitlog", "dledger"
MSGID_MAP = "msgid-map.ndjson"
JOURNAL = "convert.journal.json"
_BATCH = 1 << 16  # records moved per step: bounds the bytes held at once
# the parts of a store the conversion writes itself; anything else at the root is named in the plan
_OWN = {"commitlog", "consumequeue", "batchconsumequeue", "index", "checkpoint", "config", "abort", "lock", "abort.bak"}
_DLEGER_KEYS = {"enableDLegerCommitLog", "dLegerGroup", "dLegerSelfId", "dLegerPeers", "storePathDLedgerCommitLog"}
_CONVERTED = "# rmqstore convert"
_KEY = re.compile(r"^\s*((?:\\.|[^\s:=\\#!])+)")


@dataclass(frozen=True, slots=True)
class Member(JsonModel):
    """The DLedger member a ``--to dledger`` store gets (broker.conf's dLeger keys)."""

    group: str
    self_id: str
    peers: str
    term: int = 0
    index_file_size: int = DEFAULT_INDEX_FILE_SIZE


@dataclass(frozen=True, slots=True)
class ConvertPlan(JsonModel):
    """What a conversion reads, what it writes and where, decided before anything is written."""

    operation: ClassVar[str] = "convert"

    source: Path  # the store read, never written
    output: Path  # NEW_STORE: must not exist, or be empty
    to: str  # the framing of the new commit log: COMMITLOG or DLEDGER
    broker: str  # the version whose writer lays the records out
    file_size: int  # mappedFileSizeCommitLog, the same in both stores
    source_files: int
    source_bytes: int
    staging: Path  # where the new store is built before it is renamed onto ``output``
    msgid_map: Path
    broker_conf: str
    broker_conf_path: Path | None  # where --write-broker-conf puts it (None: printed only)
    member: Member | None = None
    resume: bool = False  # a killed run of the same conversion is finished
    carried: tuple[str, ...] = ()
    left_out: tuple[str, ...] = ()  # files of the source root the new store does not get
    notes: tuple[str, ...] = ()

    json_keys = (
        "source output to broker file_size=mappedFileSizeCommitLog source_files source_bytes staging msgid_map "
        "broker_conf_path member resume carried left_out notes broker_conf"
    )

    @property
    def fingerprint(self) -> dict[str, Any]:
        """What a half-written output must have been started with to be finished by this plan."""
        return {k: v for k, v in self.to_json().items() if k not in ("resume", "notes", "sourceBytes")}

    def planned_actions(self) -> tuple[PlannedAction, ...]:
        kind = "plain commit log" if self.to == COMMITLOG else "DLedger member (data, index, checkpoint, currterm)"
        why = f"a new store: the records in a {kind}, consume queues and index files dispatched from it"
        out = [
            PlannedAction("convert", "rewrite", self.staging, why + "; built here first", size=self.source_bytes),
            PlannedAction("convert", "rewrite", self.msgid_map, "old message id -> new message id of every record"),
        ]
        if self.broker_conf_path is not None:
            out.append(PlannedAction("convert", "rewrite", self.broker_conf_path, "broker.conf of the new store"))
        out.append(PlannedAction("convert", "move", self.output, f"{self.staging} renamed when it is complete"))
        return tuple(out)

    def summary(self) -> dict[str, Any]:
        return {
            "source": str(self.source),
            "to": self.to,
            "output": str(self.output),
            "brokerVersion": self.broker,
            "sourceFiles": self.source_files,
            "sourceBytes": self.source_bytes,
            "fileSize": self.file_size,
            "msgIdMap": str(self.msgid_map),
            "brokerConf": str(self.broker_conf_path)
            if self.broker_conf_path
            else "printed (--write-broker-conf writes it)",
            "configCopied": list(self.carried) or "none",
            "notCarried": list(self.left_out) or "none",
            "finishes": "a killed run of this conversion" if self.resume else "no",
        }

    def details(self) -> dict[str, list[dict[str, Any]]]:
        return {"notes": [{"note": n} for n in self.notes]}


@dataclass(frozen=True, slots=True)
class ConvertResult(JsonModel):
    records: int
    min_offset: int
    max_offset: int
    files: int
    cq_entries: int
    index_entries: int
    unnamed_prepared: int
    output: Path
    msgid_map: Path
    broker_conf_path: Path | None


def staging_dir(output: Path) -> Path:
    return output.parent / f".{output.name}.convert"


def plan_convert(
    st: Store,
    output: Path,
    to: str,
    *,
    member: Member | None = None,
    write_broker_conf: bool = False,
) -> ConvertPlan:
    """Check the source and the output, and say what the conversion writes (nothing is written)."""
    cfg = st.config
    _check_source(st, to)
    output = Path(os.path.abspath(output))
    source = Path(os.path.abspath(st.root))
    if output == source or source in output.parents or output in source.parents:
        raise InputError(f"{output}: the new store must be outside the source store {source} (and not hold it)")
    if to == DLEDGER and member is None:
        member = Member("", cfg.dleger_self_id or "n0", "")
    staging, resume = staging_dir(output), False
    journal = _found_journal(output)
    segs, _ = st.commitlog_segments()
    conf_path = output.parent / "broker.conf" if write_broker_conf else None
    plan = ConvertPlan(
        source, output, to, cfg.broker, cfg.commitlog_file_size, len(segs), sum(s.size for s in segs),
        staging, output.parent / MSGID_MAP, broker_conf_text(cfg, output, to, member), conf_path, member,
        carried=tuple(sorted(p.name for p in _config_files(cfg))), left_out=_left_out(cfg),
        notes=_notes(st, to),
    )  # fmt: skip
    if journal is not None:
        if journal.data.get("plan") != plan.fingerprint:
            raise UnsafePlan(
                f"{journal.path}: a killed conversion with other options is there; run it again with the same "
                f"options to finish it, or remove {journal.path.parents[1]} and start again"
            )
        resume = True
    else:
        _check_output(output, plan.msgid_map, conf_path)
    return replace(plan, resume=resume)


def _check_source(st: Store, to: str) -> None:
    cfg = st.config
    holder = st.lock_holder()
    if holder is not None:
        raise locked_error(cfg.lock_path, holder, "; the source is only read, but not while a broker writes it")
    for pj in pending(st.root):
        raise UnsafePlan(f"{st.root}: {pj}; finish it (`{pj.finish_with}`) before converting the store")
    if to not in (COMMITLOG, DLEDGER):
        raise InputError(f"--to takes {COMMITLOG} or {DLEDGER}, not {to!r}")
    if to == COMMITLOG and not cfg.dledger:
        raise InputError(f"{st.root}: the commit log is plain already (no DLedger member; --to dledger converts it)")
    if to == DLEDGER and cfg.dledger:
        raise InputError(f"{st.root}: the store is in DLedger mode already (--to commitlog converts it back)")


def _found_journal(output: Path) -> Journal | None:
    """The journal of a killed conversion into ``output``: in the folder it builds in, or in the output
    when the rename was done and the clean-up was not."""
    for root in (staging_dir(output), output):
        j = Journal.load(root / SCRATCH_DIR / JOURNAL) if root.is_dir() else None
        if j is not None and j.operation == "convert":
            return j
    return None


def _check_output(output: Path, msgid_map: Path, conf_path: Path | None) -> None:
    staging = staging_dir(output)
    if os.path.lexists(staging):
        raise UnsafePlan(f"{staging}: a folder a conversion builds in is there without its journal; remove it first")
    if output.exists():
        if not output.is_dir() or any(output.iterdir()):
            raise UnsafePlan(f"{output}: the new store's directory must not exist or be empty")
        if os.stat(output).st_dev != os.stat(output.parent).st_dev:
            raise InputError(
                f"{output}: a mount point; the new store is renamed into place as its last step, "
                f"so give a directory inside it (e.g. {output / 'store'})"
            )
    elif not output.parent.is_dir():
        raise InputError(f"{output.parent}: no such directory (the new store's parent must exist)")
    for p in (msgid_map, conf_path):
        if p is not None and os.path.lexists(p):
            raise UnsafePlan(f"{p}: exists; the conversion writes it beside the new store (move it away first)")


def _config_files(cfg: StoreConfig) -> list[Path]:
    d = cfg.config_dir
    return sorted(p for p in d.iterdir() if p.is_file()) if d.is_dir() else []


def _left_out(cfg: StoreConfig) -> tuple[str, ...]:
    """Files and folders of the source root that hold old offsets or belong to the old framing."""
    member = {p.name for p in (cfg.dledger_dir,)} if cfg.dledger else set()
    names = sorted(os.listdir(cfg.store_root))
    return tuple(n for n in names if n not in _OWN | member | {SCRATCH_DIR, "broker.conf"})


def _notes(st: Store, to: str) -> tuple[str, ...]:
    out = []
    if st.abort_exists():
        out.append("abort is present: the source was not shut down cleanly; a torn tail is refused (recover first)")
    if to == COMMITLOG:
        m = read_member(st.config)
        if m.end_index is not None and m.committed_index is not None and m.committed_index < m.end_index:
            out.append(
                f"the member's checkpoint says entries up to {m.end_index} were written and up to "
                f"{m.committed_index} committed: every intact entry is converted"
            )
    return tuple(out)


def broker_conf_text(cfg: StoreConfig, output: Path, to: str, member: Member | None) -> str:
    """The source's broker.conf for the new store: its paths pointing there, the DLedger keys for
    the new framing (dropped for a plain commit log), every other line as it was."""
    kept = []
    if cfg.source is not None:
        for line in cfg.source.read_text(encoding="latin-1").splitlines():
            m = _KEY.match(line)
            if line.startswith(_CONVERTED):
                continue  # the note of an earlier conversion
            if m is None or m.group(1) not in _DLEGER_KEYS | {"storePathRootDir", "storePathCommitLog"}:
                kept.append(line)
    kept += [
        f"{_CONVERTED} --to {to}: the store converted from {os.path.abspath(cfg.store_root)}",
        f"storePathRootDir={output}",
        f"storePathCommitLog={output / 'commitlog'}",
    ]
    if to == COMMITLOG:
        kept.append("enableDLegerCommitLog=false")
    else:
        assert member is not None
        kept += ["enableDLegerCommitLog=true", f"dLegerGroup={member.group}", f"dLegerSelfId={member.self_id}"]
        kept.append(f"dLegerPeers={member.peers}")
    if "mapedFileSizeCommitLog" not in cfg.explicit and "mappedFileSizeCommitLog" not in cfg.explicit:
        key = "mappedFileSizeCommitLog" if rules_for(cfg.broker).mapped_keys else "mapedFileSizeCommitLog"
        kept.append(f"{key}={cfg.commitlog_file_size}")
    return "\n".join(kept) + "\n"


def apply_convert(
    plan: ConvertPlan,
    st: Store,
    *,
    on_step: StepHook | None = None,
    progress: Callable[[int], None] | None = None,
) -> ConvertResult:
    """Build the new store beside ``--output`` step by step under a journal, then rename it into place.

    A run killed at any point is finished by the same command: each step not marked done is done again
    from its start (its partial files are written over)."""
    journal = _found_journal(plan.output)
    if journal is None:
        plan.staging.mkdir()
        journal = Journal(plan.staging / SCRATCH_DIR / JOURNAL, {"operation": "convert", "plan": plan.fingerprint})
        journal.save()
    journal.hook = on_step or journal.hook
    work = plan.staging / SCRATCH_DIR / "convert"
    new = Store(_new_config(st.config, plan))
    if not journal.done("commitlog"):
        journal.set(**_write_log(st, plan, new, work, progress))
        journal.mark("commitlog")
    if not journal.done("dispatch"):
        for part in ("consumequeue", "batchconsumequeue", "index"):
            shutil.rmtree(plan.staging / part, ignore_errors=True)  # what a killed run of this step left
        stats, end, reason = build(new, plan.staging, progress=progress)
        if end != journal.state["maxOffset"]:
            raise CorruptData(f"the new commit log reads up to {end} only ({reason})", path=plan.staging, pos=end)
        journal.set(cqEntries=stats.cq_entries, indexEntries=stats.index_entries, logics=stats.logics_msg_timestamp_ms)
        journal.set(index=stats.index_msg_timestamp_ms)
        journal.mark("dispatch")
    if not journal.done("files"):
        _write_files(st, plan, journal.state)
        journal.mark("files")
    return _finish(plan, journal)


def _new_config(cfg: StoreConfig, plan: ConvertPlan) -> StoreConfig:
    """The settings of the new store: the source's, with its root and its framing."""
    new = replace(cfg, store_root=plan.staging, commitlog_dirs=(), dledger_data_paths=(), source=None)
    if plan.to == COMMITLOG:
        return replace(new, enable_dleger_commit_log=False)
    assert plan.member is not None
    m = plan.member
    return replace(
        new, enable_dleger_commit_log=True, dleger_group=m.group, dleger_self_id=m.self_id, dleger_peers=m.peers,
        dledger_index_file_size=m.index_file_size,
    )  # fmt: skip


def _writer(st: Store, plan: ConvertPlan, new: Store, offsets: OffsetMap) -> LogWriter:
    cfg = new.config
    segs, _ = st.commitlog_segments()
    base = segs[0].base_offset if segs else 0
    if plan.to == COMMITLOG:
        directory = cfg.commitlog_dir
        return LogWriter(
            directory, cfg.commitlog_file_size, base, PLAIN, offsets, stale_tail=rules_for(cfg.broker).blank_stale_tail
        )
    assert plan.member is not None
    units = IndexUnits(cfg.dledger_index_dir, plan.member.index_file_size)
    data = cfg.dledger_data_dirs[0]
    framing = commitlog_framing(cfg)
    return LogWriter(data, cfg.commitlog_file_size, base, framing, offsets, units=units, term=plan.member.term)


def _write_log(
    st: Store, plan: ConvertPlan, new: Store, work: Path, progress: Callable[[int], None] | None
) -> dict[str, Any]:
    """Every record of the source, in chain order, into the new log; the message id pairs beside it."""
    for d in (new.config.commitlog_dir, new.config.dledger_dir, work):
        shutil.rmtree(d, ignore_errors=True)  # what a killed run of this step left
    work.mkdir(parents=True)
    offsets = OffsetMap(work / "offsets.bin")
    writer = _writer(st, plan, new, offsets)
    count, last_ts = 0, 0
    segs, _ = st.commitlog_segments()
    with open(work / MSGID_MAP, "wb") as ids:
        for seg, buf, items in walk_files(segs, broker=st.config.broker):
            u8 = np.frombuffer(buf, np.uint8) if len(buf) else np.zeros(0, np.uint8)
            for run in _runs(seg, items, count):
                for placed in _place_run(writer, u8, run):
                    ids.write(msgid_lines(placed))
                    count += len(placed.sizes)
                    last_ts = store_timestamp_at(placed.out, int(placed.rec_at[-1]))
                if progress:
                    progress(run.end_pos - int(run.positions[0]))
            del u8
        ids.flush()
        os.fsync(ids.fileno())
    writer.close()
    offsets.close()
    first = segs[0].base_offset if segs else 0
    return {
        "records": count, "minOffset": first, "maxOffset": writer.end, "files": len(writer.files),
        "lastStoreTimestamp": last_ts, "unnamedPrepared": writer.unnamed_prepared,
        "nextIndex": writer.next_index,
    }  # fmt: skip


def _runs(seg: Any, items: Any, count: int) -> Any:
    """The runs of intact records of one source file; anything else but the file's end is refused."""
    for item in items:
        if isinstance(item, Run):
            yield item
        elif isinstance(item, Damage):
            raise item.error or CorruptData(
                item.why, path=seg.path, pos=item.pos, phy_offset=seg.base_offset + item.pos
            )
        elif isinstance(item, BlankEnd) and item.error is not None:
            raise item.error
        elif isinstance(item, DataEnd) and item.garbage is not None:
            err = item.error or CorruptData(
                item.why, path=seg.path, pos=item.pos, phy_offset=seg.base_offset + item.pos
            )
            raise CorruptData(
                f"{err.what} after {count} intact records (a torn tail: `rmqstore recover` the source first)",
                path=err.path, pos=err.pos, phy_offset=err.phy_offset,
            )  # fmt: skip


def _place_run(writer: LogWriter, u8: np.ndarray, run: Run) -> Any:
    """The records of a run, ``_BATCH`` at a time, through the writer."""
    head = run.seg.framing.head
    pos = run.positions
    sizes = np.append(pos[1:] - head, run.end_pos) - pos
    for a in range(0, len(pos), _BATCH):
        b = min(a + _BATCH, len(pos))
        lo = int(pos[a]) - head
        hi = int(pos[b]) - head if b < len(pos) else run.end_pos
        data = records_of(u8[lo:hi], pos[a:b] - lo, sizes[a:b], head)
        yield from writer.put(data, sizes[a:b], str(run.seg.path))


def _write_files(st: Store, plan: ConvertPlan, state: dict[str, Any]) -> None:
    """The checkpoint, config/ as it is, the DLedger member's files, broker.conf and the message id map."""
    root = plan.staging
    before = read_if_present(st.config.checkpoint_path, "checkpoint")
    page = before if before is not None and len(before) == cpmod.FILE_SIZE else None
    physic = cpmod.decode(page).physic_msg_timestamp_ms if page else state["lastStoreTimestamp"]
    logics = state["logics"] or (cpmod.decode(page).logics_msg_timestamp_ms if page else 0)
    atomic_write(root / "checkpoint", cpmod.encode_timestamps(page, physic, logics, state["index"]))
    shutil.rmtree(root / "config", ignore_errors=True)
    if st.config.config_dir.is_dir():
        shutil.copytree(st.config.config_dir, root / "config", copy_function=shutil.copy2)
    if plan.to == DLEDGER:
        assert plan.member is not None
        last = str(state["nextIndex"] - 1)
        member = root / f"dledger-{plan.member.self_id}"
        atomic_write(member / "checkpoint", encode_member_file({"committedIndex": last, "endIndex": last}))
        vote = {"voteLeader": plan.member.self_id, "currTerm": str(plan.member.term)}
        atomic_write(member / "currterm", encode_member_file(vote))
    fsync_tree(root)


def fsync_tree(root: Path) -> None:
    """Make every file and directory under ``root`` durable before it is renamed into place."""
    for d, _dirs, files in os.walk(root):
        for f in files:
            fd = os.open(os.path.join(d, f), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fsync_dir(Path(d))


def _finish(plan: ConvertPlan, journal: Journal) -> ConvertResult:
    work = plan.staging / SCRATCH_DIR / "convert"
    if not journal.done("beside"):
        if (work / MSGID_MAP).exists():
            os.replace(work / MSGID_MAP, plan.msgid_map)
        if plan.broker_conf_path is not None:
            atomic_write(plan.broker_conf_path, plan.broker_conf.encode("latin-1"))
        fsync_dir(plan.output.parent)
        journal.mark("beside")
    if not journal.done("rename"):
        if plan.staging.exists():
            _rename(plan.staging, plan.output)
        journal.path = plan.output / SCRATCH_DIR / JOURNAL
        journal.mark("rename")
    s = journal.state
    shutil.rmtree(plan.output / SCRATCH_DIR / "convert", ignore_errors=True)
    journal.remove()
    try:
        (plan.output / SCRATCH_DIR).rmdir()
    except OSError:
        pass
    journal.hook("convert:finished")
    return ConvertResult(
        s["records"], s["minOffset"], s["maxOffset"], s["files"], s["cqEntries"], s["indexEntries"],
        s["unnamedPrepared"], plan.output, plan.msgid_map, plan.broker_conf_path,
    )  # fmt: skip


def _rename(staging: Path, output: Path) -> None:
    try:
        os.rename(staging, output)
    except OSError as e:
        if e.errno in (errno.ENOTEMPTY, errno.EEXIST):
            raise UnsafePlan(
                f"{output}: something was put there while converting; {staging} holds the new store"
            ) from None
        raise
    fsync_dir(output.parent)
