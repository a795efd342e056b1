"""What the broker's clean services would delete now (store-format.md §10, §5.5, §1.2), read only.

One :func:`plan_expire` is one pass of ``CleanCommitLogService`` followed by one pass of
``CleanConsumeQueueService`` on a store no broker holds:

* commit log (§10.1): when triggered by the hour (``deleteWhen``), by disk usage
  (``diskMaxUsedSpaceRatio`` and the forced-clean levels) or manually (``--force``, what
  ``mqadmin deleteExpiredCommitLog`` does), walk every file but the newest, oldest first; delete a
  file whose mtime + ``fileReservedTime`` hours has passed (or any file when the disk is above the
  forced-clean level and ``cleanFileForciblyEnable``); stop at the first file kept, and after
  ``deleteFileBatchMax`` deletions;
* consume queues (§10.2): every file but a queue's last whose last entry points below the new
  commit log min offset, oldest first, stopping at the first file kept;
* index (§5.5): when the first file's endPhyOffset is below the min offset, every file but the
  last with endPhyOffset below it, stopping at the first that is not.

On a DLedger store the data and index files of the DLedger member follow the member's own clean
service instead (its part below): the broker's pass deletes only a migrated store's old
``commitlog/`` part, and the DLedger pass, disabled while that part exists, deletes data files by
DLedger's rules and the index files before the ledger's new begin index; the consume queue and index
passes then follow the new min offset as on a plain store.

The plan sits below the operations (it asks the walk which commit log file holds data) so that every reader of a store's expiry (``expire``, which
applies it, and ``report``, which shows it) plans it the same way.
"""

from __future__ import annotations

import os
import re
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from rmqstore.codec.dledger import DLEDGER, INDEX_UNIT_SIZE
from rmqstore.codec.indexfile import HEADER as INDEX_HEADER
from rmqstore.errors import ConfigError, CorruptData
from rmqstore.rules import rules_for
from rmqstore.safety.actions import PlannedAction
from rmqstore.safety.plan import JsonModel
from rmqstore.store import Store
from rmqstore.store.dledger import DLedgerIndex, Member, read_member
from rmqstore.store.files import read_at
from rmqstore.store.layout import Segment, StoreConfig
from rmqstore.timeparse import format_time_ms
from rmqstore.walk.chain import holds_data
from rmqstore.walk.dledger import ENTRY, file_entries

HOUR_MS = 3_600_000


# -- settings -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ExpireSettings(JsonModel):
    """The effective cleaning settings, with the broker's names in :meth:`shown`."""

    broker: str
    file_reserved_time_h: int
    delete_when: str
    delete_hours: tuple[int, ...]
    disk_max_used_space_ratio: int  # percent, after the getter's clamp to [10, 95]
    clean_file_forcibly_enable: bool
    delete_file_batch_max: int
    disk_space_warning_level_ratio: float  # fraction
    disk_space_clean_forcibly_ratio: float  # fraction
    notes: tuple[str, ...] = ()

    def shown(self) -> dict[str, object]:
        return self.json_view(
            "broker=brokerVersion file_reserved_time_h=fileReservedTime delete_when disk_max_used_space_ratio"
            " clean_file_forcibly_enable delete_file_batch_max disk_space_warning_level_ratio"
            " disk_space_clean_forcibly_ratio"
        )


def parse_delete_when(text: str, *, path: Path | str = "deleteWhen") -> tuple[int, ...]:
    """``deleteWhen`` hours as ``UtilAll.isItTimeToDo`` reads them: split on ';', Integer.parseInt each.

    A value Java cannot parse makes every pass of the broker's clean task throw before it deletes
    anything, so it is refused here instead of being silently ignored.
    """
    parts = text.split(";") if ";" in text else [text]
    while len(parts) > 1 and parts[-1] == "":  # String.split drops trailing empty strings
        parts.pop()
    if parts == [""] and text.endswith(";"):
        parts = []
    hours = []
    for part in parts:
        if not re.fullmatch(r"[+-]?[0-9]+", part):
            raise ConfigError(
                f"deleteWhen={text!r}: {part!r} is not an integer hour; the broker's clean task fails on it "
                "at every pass and never deletes anything",
                path=path,
            )
        hours.append(int(part))
    return tuple(hours)


def _fraction(v: float) -> float:
    return v / 100.0 if v > 1 else v


def expire_settings(
    cfg: StoreConfig,
    *,
    broker: str | None = None,
    file_reserved_time_h: int | None = None,
    delete_when: str | None = None,
    disk_max_used_space_ratio: int | None = None,
    clean_file_forcibly_enable: bool | None = None,
    delete_file_batch_max: int | None = None,
    disk_space_warning_level_ratio: float | None = None,
    disk_space_clean_forcibly_ratio: float | None = None,
) -> ExpireSettings:
    """Settings from broker.conf (as the given broker version reads it) and explicit overrides.

    The two forced-clean levels given here act like the JVM system properties
    ``rocketmq.broker.diskSpaceWarningLevelRatio`` / ``...CleanForciblyRatio`` (fractions; a
    value above 1 is taken as a percent): the only way to set them on 4.x, and an override of the
    broker.conf keys on 5.x.
    """
    broker = broker or cfg.broker
    rules = rules_for(broker)
    notes: list[str] = []
    src = cfg.source or "broker.conf"
    when = cfg.delete_when if delete_when is None else delete_when
    hours = parse_delete_when(when, path=src if delete_when is None else "--delete-when")
    bad = [h for h in hours if not 0 <= h <= 23]
    if bad:
        notes.append(f"deleteWhen hour(s) {bad} never match a local hour (0-23)")
    reserved = cfg.file_reserved_time_h if file_reserved_time_h is None else file_reserved_time_h
    max_ratio = cfg.disk_max_used_space_ratio if disk_max_used_space_ratio is None else disk_max_used_space_ratio
    clamped = min(max(max_ratio, 10), 95)  # MessageStoreConfig.getDiskMaxUsedSpaceRatio
    if clamped != max_ratio:
        notes.append(f"diskMaxUsedSpaceRatio {max_ratio} is clamped to {clamped} by the broker")
    forcibly_enable = (
        cfg.clean_file_forcibly_enable if clean_file_forcibly_enable is None else clean_file_forcibly_enable
    )

    if rules.expire_batch_max_in_config:
        batch = cfg.delete_file_batch_max
    else:
        batch = 10  # MappedFileQueue.DELETE_FILES_BATCH_MAX
        if "deleteFileBatchMax" in cfg.explicit:
            notes.append(f"deleteFileBatchMax in {src} is ignored by a {broker} broker (fixed at 10)")
    if delete_file_batch_max is not None:
        batch = delete_file_batch_max

    warning, forcibly = 0.90, 0.85  # 4.x system property defaults; 5.x key defaults 90 / 85
    if rules.expire_levels_in_config:  # 5.x keys are int percents
        if "diskSpaceWarningLevelRatio" in cfg.explicit:
            warning = cfg.disk_space_warning_level_ratio / 100.0
        if "diskSpaceCleanForciblyRatio" in cfg.explicit:
            forcibly = cfg.disk_space_clean_forcibly_ratio / 100.0
    else:
        for key in ("diskSpaceWarningLevelRatio", "diskSpaceCleanForciblyRatio"):
            if key in cfg.explicit:
                notes.append(
                    f"{key} in {src} is ignored by a {broker} broker (it reads the JVM system property "
                    f"rocketmq.broker.{key}); pass it as an option instead"
                )
    if disk_space_warning_level_ratio is not None:
        warning = _fraction(disk_space_warning_level_ratio)
    if disk_space_clean_forcibly_ratio is not None:
        forcibly = _fraction(disk_space_clean_forcibly_ratio)
    if rules.expire_levels_in_config:
        warning = min(max(warning, 0.35), 0.90)
        forcibly = min(max(forcibly, 0.30), 0.85)
    return ExpireSettings(
        broker=broker,
        file_reserved_time_h=reserved,
        delete_when=when,
        delete_hours=hours,
        disk_max_used_space_ratio=clamped,
        clean_file_forcibly_enable=forcibly_enable,
        delete_file_batch_max=batch,
        disk_space_warning_level_ratio=warning,
        disk_space_clean_forcibly_ratio=forcibly,
        notes=tuple(notes),
    )


# -- disk usage and triggers ----------------------------------------------------------------


def partition_used_ratio(path: Path, broker: str, *, rounds_up: bool | None = None) -> float:
    """``UtilAll.getDiskPartitionSpaceUsedPercent`` of the file system holding ``path``; -1 if missing.
    ``rounds_up``: df's rounding to a whole percent (default: as ``broker`` computes it)."""
    try:
        sv = os.statvfs(path)
    except OSError:
        return -1.0
    total = sv.f_blocks * sv.f_frsize
    if total <= 0:
        return -1.0
    used = total - sv.f_bfree * sv.f_frsize
    if not (rules_for(broker).expire_ratio_rounds_up if rounds_up is None else rounds_up):
        return used / total
    entire = used + sv.f_bavail * sv.f_frsize
    if entire <= 0:
        return -1.0
    return (used * 100 // entire + (1 if used * 100 % entire else 0)) / 100.0


DiskUsage = Callable[[Path], float]


def measured_disk_usage(broker: str, *, rounds_up: bool | None = None) -> DiskUsage:
    """The real file-system usage, computed as ``broker`` computes it (``rounds_up``: as DLedger does)."""
    return lambda path: partition_used_ratio(path, broker, rounds_up=rounds_up)


def commitlog_used_ratio(cfg: StoreConfig, disk_usage: DiskUsage) -> float:
    # 5.x (multi-path) takes the smallest ratio among the commit log directories.
    dirs = cfg.commitlog_dirs or (cfg.commitlog_dir,)
    return min(disk_usage(d) for d in dirs)


@dataclass(frozen=True, slots=True)
class Triggers(JsonModel):
    """Why (or why not) ``CleanCommitLogService`` deletes in this pass."""

    local_hour: int
    time: bool  # the local hour is one of deleteWhen
    space: bool  # isSpaceToDelete
    manual: bool  # executeDeleteFilesManually (--force)
    clean_immediately: bool  # cleanImmediately && cleanFileForciblyEnable: ignore fileReservedTime
    disk_full: bool  # above the warning level: a broker would refuse new messages
    commitlog_used_ratio: float
    consumequeue_used_ratio: float

    @property
    def triggered(self) -> bool:
        return self.time or self.space or self.manual

    def shown(self) -> dict[str, object]:
        return {
            **self.json_view("local_hour time space manual clean_immediately disk_full"),
            "commitLogDiskUsedRatio": round(self.commitlog_used_ratio, 4),
            "consumeQueueDiskUsedRatio": round(self.consumequeue_used_ratio, 4),
        }


def space_to_delete(settings: ExpireSettings, physic: float, logics: float) -> tuple[bool, bool, bool]:
    """``isSpaceToDelete``: (space trigger, cleanImmediately, disk full) for the two partitions' ratios."""
    max_ratio = settings.disk_max_used_space_ratio / 100.0
    warning, forcibly = settings.disk_space_warning_level_ratio, settings.disk_space_clean_forcibly_ratio
    clean_now = disk_full = False
    if rules_for(settings.broker).expire_forced_level_triggers:
        for r in (physic, logics):
            if r > warning:
                return True, True, True
            if r > forcibly:
                return True, True, False
        return (physic < 0 or physic > max_ratio or logics < 0 or logics > max_ratio), False, False
    # 4.x: the levels only set cleanImmediately; only diskMaxUsedSpaceRatio (or -1) triggers.
    for r in (physic, logics):
        if r > warning:
            clean_now = disk_full = True
        elif r > forcibly:
            clean_now = True
        if r < 0 or r > max_ratio:
            return True, clean_now, disk_full
    return False, clean_now, disk_full


def local_hour(now_ms: int) -> int:
    """``Calendar.HOUR_OF_DAY`` of ``now`` in this process's time zone (TZ)."""
    return time.localtime(now_ms / 1000).tm_hour


def evaluate_triggers(
    st: Store, settings: ExpireSettings, *, now_ms: int, force: bool, disk_usage: DiskUsage
) -> Triggers:
    hour = local_hour(now_ms)
    physic = commitlog_used_ratio(st.config, disk_usage)
    logics = disk_usage(st.consume_queues.directory)
    space, clean_now, full = space_to_delete(settings, physic, logics)
    return Triggers(
        local_hour=hour,
        time=hour in settings.delete_hours,
        space=space,
        manual=force,
        clean_immediately=clean_now and settings.clean_file_forcibly_enable,
        disk_full=full,
        commitlog_used_ratio=physic,
        consumequeue_used_ratio=logics,
    )


# -- the DLedger member's clean service -------------------------------------------------------
#
# What the DLedger member's own clean service deletes in one pass (``DLedgerMmapFileStore.CleanSpaceService``).
#
# In DLedger mode the broker's clean task leaves the DLedger files to DLedger.
# ``DLedgerCommitLog.deleteExpiredFile`` deletes only a migrated store's old ``commitlog/`` part, by the
# broker's own rules, and its last file too once it is the only one left; while that part exists it
# disables DLedger's deletion (``disableDeleteDledger``: fileReservedHours 87600, no forced clean).
# Without it, ``refreshConfig`` hands DLedger the broker's settings: fileReservedTime + 1 hours,
# deleteWhen, cleanFileForciblyEnable, and (4.9.4+) diskMaxUsedSpaceRatio as the check-expired level.
# A manual deletion (``mqadmin deleteExpiredCommitLog``) does not reach DLedger: only the clean
# service deletes its files. It:
#
# * runs when the local hour is a deleteWhen hour, or when the store root's disk or every data
#   directory's disk is above the check-expired level (a missing directory counts as -1);
# * deletes data files oldest first, never the last, stopping at the first whose mtime +
#   fileReservedHours (at least one hour) is after now, and after 10 files (``MmapFileList``'s batch);
#   above DLedger's forced-clean level with forced clean on, whatever their age;
# * after a deletion reads the ledger's new begin index from the first data file's first entry
#   (``reviseLedgerBeginIndex``) and drops the index files that end at or before its unit
#   (``MmapFileList.resetOffset``).
#
# The begin index is not kept on disk: a deletion writes neither the member's checkpoint
# (``endIndex``, ``committedIndex``) nor anything else, and the engine reads the begin index again
# from the first data file when it starts.
#
# The levels are DLedgerConfig's: the JVM properties ``dledger.disk.ratio.check`` (0.70, replaced by
# diskMaxUsedSpaceRatio on 4.9.4+) and ``dledger.disk.ratio.clean`` (0.85, at least 0.50), the disk
# full level 0.05 above it (at most 0.95). They are the same in dledger 0.2.6 (4.9.4) and 0.3.1.2
# (5.2.0); what differs by broker version is in ``rmqstore.rules``.

DISABLED_RESERVED_HOURS = 24 * 365 * 10  # DLedgerCommitLog.disableDeleteDledger
CHECK_EXPIRED_RATIO = 0.70  # DLedgerConfig.diskSpaceRatioToCheckExpired before 4.9.4
FORCE_CLEAN_RATIO = 0.85  # DLedgerConfig.diskSpaceRatioToForceClean (-Ddledger.disk.ratio.clean)
DELETE_FILES_BATCH_MAX = 10  # MmapFileList.DELETE_FILES_BATCH_MAX: not a setting


def java_float(v: float) -> float:
    """``v`` as a Java float, as DLedgerConfig keeps its levels (0.85f is 0.8500000238...)."""
    return float(struct.unpack(">f", struct.pack(">f", v))[0])


@dataclass(frozen=True, slots=True)
class DLedgerCleaning(JsonModel):
    """The clean service's settings as the broker hands them over, and what triggers this pass."""

    file_reserved_hours: int
    disabled: bool  # a migrated store's old commitlog/ part exists
    enable_force_clean: bool
    check_expired_ratio: float
    force_clean_ratio: float
    full_ratio: float
    store_base_ratio: float
    data_ratio: float
    time_up: bool
    manual: bool  # --force: the broker's manual deletion, which DLedger does not see

    @property
    def check_expired(self) -> bool:
        return self.store_base_ratio > self.check_expired_ratio or self.data_ratio > self.check_expired_ratio

    @property
    def force_clean(self) -> bool:
        return self.store_base_ratio > self.force_clean_ratio or self.data_ratio > self.force_clean_ratio

    @property
    def disk_full(self) -> bool:
        return self.store_base_ratio > self.full_ratio or self.data_ratio > self.full_ratio

    @property
    def triggered(self) -> bool:
        return self.time_up or self.check_expired

    @property
    def clean_immediately(self) -> bool:
        return self.force_clean and self.enable_force_clean

    def shown(self) -> dict[str, object]:
        return {
            **self.json_view("file_reserved_hours disabled=deletionDisabled enable_force_clean=enableDiskForceClean"),
            "diskSpaceRatioToCheckExpired": round(self.check_expired_ratio, 4),
            "diskSpaceRatioToForceClean": round(self.force_clean_ratio, 4),
            "diskFullRatio": round(self.full_ratio, 4),
            "storeBaseRatio": round(self.store_base_ratio, 4),
            "dataRatio": round(self.data_ratio, 4),
            "timeUp": self.time_up,
            "checkExpired": self.check_expired,
            "forceClean": self.force_clean,
            "diskFull": self.disk_full,
        }


def dledger_cleaning(
    cfg: StoreConfig,
    *,
    broker: str,
    file_reserved_time_h: int,
    disk_max_used_space_ratio: int,
    clean_file_forcibly_enable: bool,
    time_up: bool,
    manual: bool,
    disabled: bool,
    disk_usage: DiskUsage,
) -> DLedgerCleaning:
    """The clean service's state for one pass, from the broker's (already clamped) settings."""
    rules = rules_for(broker)
    check = (
        java_float(disk_max_used_space_ratio / 100) if rules.dledger_check_ratio_from_broker else CHECK_EXPIRED_RATIO
    )
    force = java_float(FORCE_CLEAN_RATIO)
    data = min([100.0, *(disk_usage(d) if d.exists() else -1.0 for d in cfg.dledger_data_dirs)])
    return DLedgerCleaning(
        file_reserved_hours=DISABLED_RESERVED_HOURS if disabled else file_reserved_time_h + 1,
        disabled=disabled,
        enable_force_clean=clean_file_forcibly_enable and not disabled,
        check_expired_ratio=java_float(check),
        force_clean_ratio=max(force, 0.50),
        full_ratio=min(java_float(force + java_float(0.05)), 0.95),
        store_base_ratio=disk_usage(cfg.store_root),
        data_ratio=data,
        time_up=time_up,
        manual=manual,
    )


@dataclass(frozen=True, slots=True)
class Expired:
    """A DLedger file the pass deletes, and why."""

    path: Path
    why: str


def expired_data_files(
    segs: list[Segment], cleaning: DLedgerCleaning, now_ms: int, mtime_ms: Callable[[Path], int]
) -> tuple[list[Expired], str]:
    """``MmapFileList.deleteExpiredFileByTime`` over the data files: the files deleted and why no more."""
    if not cleaning.triggered:
        return [], "DLedger: not triggered (no deleteWhen hour, no disk above diskSpaceRatioToCheckExpired)"
    reserved_ms = max(cleaning.file_reserved_hours * HOUR_MS, HOUR_MS)
    out: list[Expired] = []
    for seg in segs[:-1]:
        mtime = mtime_ms(seg.path)
        expired = now_ms >= mtime + reserved_ms
        if not (expired or cleaning.clean_immediately):
            hours = (mtime + reserved_ms - now_ms) / HOUR_MS
            return out, (
                f"DLedger: kept {seg.path.name}: mtime + {cleaning.file_reserved_hours}h is after now (expires in "
                f"{hours:.1f}h); later files are never deleted before it"
            )
        why = (
            f"DLedger: mtime + fileReservedHours {cleaning.file_reserved_hours}h <= now (age {(now_ms - mtime) / HOUR_MS:.1f}h)"
            if expired
            else f"DLedger: disk above diskSpaceRatioToForceClean {cleaning.force_clean_ratio:.2f} (forced clean)"
        )
        out.append(Expired(seg.path, why))
        if len(out) >= DELETE_FILES_BATCH_MAX:
            return out, f"DLedger: batch limit: {DELETE_FILES_BATCH_MAX} data files per pass"
    last = "only the last data file is left" if len(segs) <= 1 else "every data file but the last"
    return out, f"DLedger: {last}"


def begin_index(seg: Segment) -> int | None:
    """``reviseLedgerBeginIndex``: the entry index of the data file's first entry (None: it starts with none)."""
    first = next(file_entries(seg), None)
    return first.header.index if first is not None and first.kind == ENTRY and first.header is not None else None


def expired_index_files(index_segs: list[Segment], begin: int) -> list[Expired]:
    """``MmapFileList.resetOffset(begin x 32)``: every index file that ends at or before the begin unit."""
    at = begin * INDEX_UNIT_SIZE
    return [
        Expired(
            s.path,
            f"DLedger index: ends at {s.end_offset}, at or before the unit of the new begin index {begin} ({at})",
        )
        for s in index_segs
        if s.end_offset <= at
    ]


def checkpoint_note(member: Member) -> str:
    """What the pass leaves in the member checkpoint (nothing: the engine does not write it on deletion)."""
    path = member.checkpoint.path
    if member.checkpoint.values is None:
        return f"{path} is missing; a deletion does not write it"
    return (
        f"{path} is not changed (endIndex {member.end_index}, committedIndex {member.committed_index}): "
        "a deletion moves only the ledger's begin index, which the engine reads from the first data file"
    )


# -- the plan ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FileAction(JsonModel):
    """One file to delete."""

    kind: str  # "commitlog" | "dledger-index" | "consumequeue" | "index"
    path: Path
    rel_path: str  # as shown, and where it goes under a quarantine folder
    size: int
    mtime_ms: int
    why: str
    topic: str | None = None
    queue_id: int | None = None

    def shown(self) -> dict[str, object]:
        out: dict[str, object] = {
            "kind": self.kind,
            "path": self.rel_path,
            "size": self.size,
            "mtime": format_time_ms(self.mtime_ms),
            "mtimeMs": self.mtime_ms,
            "reason": self.why,
        }
        if self.topic is not None:
            out["topic"] = self.topic
            out["queueId"] = self.queue_id
        return out


@dataclass(frozen=True, slots=True)
class ExpirePlan(JsonModel):
    """What one expire run would delete, and why it deletes no more."""

    operation: ClassVar[str] = "expire"

    store_root: Path
    now_ms: int  # the time the triggers and the files' ages are evaluated at
    settings: ExpireSettings
    triggers: Triggers
    min_phy_offset: int  # first commit log file's offset now (-1: no file)
    new_min_phy_offset: int  # after the commit log deletions
    commitlog: tuple[FileAction, ...]
    consumequeue: tuple[FileAction, ...]
    index: tuple[FileAction, ...]
    commitlog_stop: str  # why the commit log pass deleted no more
    notes: tuple[str, ...] = ()  # informational
    warnings: tuple[str, ...] = ()  # parts skipped; need attention
    quarantine: Path | None = None  # move the files to a fresh folder inside it instead of deleting them
    dledger_index: tuple[FileAction, ...] = ()  # the DLedger member's index files before its new begin index
    dledger: DLedgerCleaning | None = None  # the DLedger member's clean service in this pass (DLedger stores)

    @property
    def actions(self) -> tuple[FileAction, ...]:
        return self.commitlog + self.dledger_index + self.consumequeue + self.index

    @property
    def freed_size(self) -> int:
        return sum(a.size for a in self.actions)

    @property
    def nothing_to_do(self) -> bool:
        return not self.actions

    def planned_actions(self) -> tuple[PlannedAction, ...]:
        """The deletions in the common action shape (see :class:`rmqstore.safety.PlannedAction`)."""
        kept = self.quarantine is not None
        verb = "move" if kept else "delete"
        return tuple(PlannedAction("expire", verb, a.path, a.why, size=a.size, kept=kept) for a in self.actions)

    def summary(self) -> dict[str, object]:
        """The run as a cron log shows it: the settings and triggers in the broker's names, and the files."""
        return {
            "store": os.path.abspath(self.store_root),
            "now": format_time_ms(self.now_ms),
            "nowMs": self.now_ms,
            "settings": self.settings.shown(),
            "triggers": self.triggers.shown(),
            "minPhyOffset": self.min_phy_offset,
            "newMinPhyOffset": self.new_min_phy_offset,
            "commitLogStop": self.commitlog_stop,
            **({"dledger": self.dledger.shown()} if self.dledger is not None else {}),
            "actions": [a.shown() for a in self.actions],
            "freedBytes": self.freed_size,
            "notes": list(self.notes),
            "warnings": list(self.warnings),
        }

    def details(self) -> dict[str, list[dict[str, Any]]]:
        return {}  # the actions say it all


def _mtime_ms(path: Path) -> tuple[int, int]:
    s = path.stat()
    return s.st_mtime_ns // 1_000_000, s.st_size


def _rel(root: Path, path: Path, fallback: str) -> str:
    try:
        return str(path.relative_to(root))
    except ValueError:
        return fallback


def _hours(ms: int) -> str:
    return f"{ms / HOUR_MS:.1f}h"


def _segments(st: Store) -> list[Segment]:
    segs, problems = st.commitlog_segments()
    if problems:
        p = problems[0]
        raise CorruptData(f"{p.what} (a broker would not load this commit log; see rmqstore check)", path=p.path, pos=0)
    return segs


def _plan_commitlog(
    st: Store, segs: list[Segment], settings: ExpireSettings, triggers: Triggers, now_ms: int
) -> tuple[list[FileAction], str]:
    """``CommitLog.deleteExpiredFile`` on the plain commit log files (a DLedger store's old part)."""
    if not triggers.triggered:
        return [], "not triggered"
    # The newest file is the one a broker writes to: trailing pre-allocated (all-zero) files are
    # not in its file list (recovery deletes them), so they do not count as the newest.
    last = len(segs) - 1
    while last > 0 and not holds_data(segs[last]):
        last -= 1
    reserved_ms = settings.file_reserved_time_h * HOUR_MS
    actions: list[FileAction] = []
    stop = "only the newest file is left" if last <= 0 else ""
    for seg in segs[:last]:
        mtime, size = _mtime_ms(seg.path)
        expired = now_ms >= mtime + reserved_ms
        if not (expired or triggers.clean_immediately):
            stop = (
                f"kept {seg.path.name}: mtime {format_time_ms(mtime)} + {settings.file_reserved_time_h}h is after now "
                f"(expires in {_hours(mtime + reserved_ms - now_ms)}); later files are never deleted before it"
            )
            break
        why = (
            f"mtime + {settings.file_reserved_time_h}h <= now (age {_hours(now_ms - mtime)})"
            if expired
            else f"disk above the forced-clean level {percent(settings.disk_space_clean_forcibly_ratio)} (cleanImmediately)"
        )
        rel = _rel(st.root, seg.path, f"commitlog/{seg.path.name}")
        actions.append(FileAction("commitlog", seg.path, rel, size, mtime, why))
        if len(actions) >= settings.delete_file_batch_max:
            stop = f"batch limit: {settings.delete_file_batch_max} files per pass (deleteFileBatchMax)"
            break
    else:
        if last > 0:
            stop = "every file before the newest is deleted"
    if st.config.dledger and len(segs) == 1 and not actions:
        return _last_old_file(st, segs[0], settings, triggers, now_ms)
    return actions, stop


def _last_old_file(
    st: Store, seg: Segment, settings: ExpireSettings, triggers: Triggers, now_ms: int
) -> tuple[list[FileAction], str]:
    """``DLedgerCommitLog.deleteExpiredFile``: the old part's last file goes too once it is the only one."""
    mtime, size = _mtime_ms(seg.path)
    reserved_ms = settings.file_reserved_time_h * HOUR_MS
    if not (now_ms >= mtime + reserved_ms or triggers.clean_immediately):
        return (
            [],
            f"kept the old commit log's last file {seg.path.name} (expires in {_hours(mtime + reserved_ms - now_ms)})",
        )
    why = f"the old commit log's last file, mtime + {settings.file_reserved_time_h}h <= now (age {_hours(now_ms - mtime)})"
    if now_ms < mtime + reserved_ms:
        why = f"the old commit log's last file, disk above the forced-clean level {percent(settings.disk_space_clean_forcibly_ratio)}"
    rel = _rel(st.root, seg.path, f"commitlog/{seg.path.name}")
    return [FileAction("commitlog", seg.path, rel, size, mtime, why)], "the old commit log part is gone"


@dataclass(frozen=True, slots=True)
class _DLedgerPass:
    cleaning: DLedgerCleaning
    data: list[FileAction]
    index: list[FileAction]
    stop: str
    notes: list[str]


def _plan_dledger(
    st: Store, segs: list[Segment], settings: ExpireSettings, triggers: Triggers, now_ms: int, disk_usage: DiskUsage
) -> _DLedgerPass:
    """The DLedger member's clean service: its data files, then its index files before the new begin index."""
    data = [s for s in segs if s.framing is DLEDGER]
    cleaning = dledger_cleaning(
        st.config, broker=settings.broker, file_reserved_time_h=settings.file_reserved_time_h,
        disk_max_used_space_ratio=settings.disk_max_used_space_ratio,
        clean_file_forcibly_enable=settings.clean_file_forcibly_enable, time_up=triggers.time, manual=triggers.manual,
        disabled=len(data) < len(segs), disk_usage=disk_usage,
    )  # fmt: skip
    expired, stop = expired_data_files(data, cleaning, now_ms, lambda p: _mtime_ms(p)[0])
    if cleaning.disabled:
        stop += f" (deletion disabled while the old commit log part exists: fileReservedHours {cleaning.file_reserved_hours})"
    notes = [checkpoint_note(read_member(st.config))]
    if cleaning.disk_full:
        notes.append(
            f"a data disk above DLedger's full level {cleaning.full_ratio:.2f}: the member refuses appends (DISK_FULL)"
        )
    if cleaning.manual and not cleaning.triggered:
        notes.append("--force is the broker's manual deletion: it never reaches the DLedger files")
    actions = [_file_action(st, "commitlog", e.path, e.why, "dledger-data") for e in expired]
    index: list[FileAction] = []
    if expired:
        begin = begin_index(data[len(expired)])
        with DLedgerIndex(st.config) as member_index:
            index_segs = member_index.segments
        if begin is None:
            notes.append(f"{data[len(expired)].path} does not start with an entry: no DLedger index file is dropped")
        else:
            notes.append(f"the ledger's begin index moves to {begin}")
            index = [
                _file_action(st, "dledger-index", e.path, e.why, "dledger-index")
                for e in expired_index_files(index_segs, begin)
            ]
    return _DLedgerPass(cleaning, actions, index, stop, notes)


def _file_action(st: Store, kind: str, path: Path, why: str, where: str) -> FileAction:
    mtime, size = _mtime_ms(path)
    return FileAction(kind, path, _rel(st.root, path, f"{where}/{path.name}"), size, mtime, why)


def _plan_consumequeues(st: Store, min_phy: int) -> tuple[list[FileAction], list[str]]:
    """``deleteExpiredFileByOffset(minPhy, 20)`` for every queue (§10.2)."""
    actions: list[FileAction] = []
    warnings: list[str] = []
    for q in st.consume_queues.queues():
        topic, qid = q.topic, q.queue_id
        expired, stopped = q.expired_files(min_phy)
        if stopped is not None:
            warnings.append(f"skipped queue {topic}/{qid}: {stopped}")
        for seg, last_phy in expired:
            mtime, size = _mtime_ms(seg.path)
            rel = _rel(st.root, seg.path, f"consumequeue/{topic}/{qid}/{seg.path.name}")
            why = f"last entry's commit log offset {last_phy} < min offset {min_phy}"
            actions.append(FileAction("consumequeue", seg.path, rel, size, mtime, why, topic, qid))
    return actions, warnings


def _index_files(st: Store) -> tuple[list[tuple[Path, int]], list[str], list[str]]:
    """(path, endPhyOffset) of every index file, in the broker's load order (by name)."""
    files, problems = st.index_files()
    notes = [str(p) for p in problems]
    out: list[tuple[Path, int]] = []
    for p in files:
        raw = read_at(p, 0, INDEX_HEADER.size)
        if len(raw) < INDEX_HEADER.size:
            return [], notes, [f"skipped index files: {p} is shorter than its {INDEX_HEADER.size}-byte header"]
        out.append((p, INDEX_HEADER.unpack(raw)[3]))
    # With `abort` present a starting broker first drops the index files newer than the
    # checkpoint's indexMsgTimestamp and re-dispatch then opens a new last file, so judging the
    # files on disk as they are deletes the same older files the broker would.
    return out, notes, []


def _plan_index(st: Store, min_phy: int) -> tuple[list[FileAction], list[str], list[str]]:
    files, notes, warnings = _index_files(st)
    actions: list[FileAction] = []
    if not files or files[0][1] >= min_phy:
        return actions, notes, warnings
    for p, end_phy in files[:-1]:
        if end_phy >= min_phy:
            break
        mtime, size = _mtime_ms(p)
        why = f"endPhyOffset {end_phy} < min offset {min_phy}"
        actions.append(FileAction("index", p, _rel(st.root, p, f"index/{p.name}"), size, mtime, why))
    return actions, notes, warnings


def plan_expire(
    st: Store,
    *,
    now_ms: int,
    settings: ExpireSettings | None = None,
    force: bool = False,
    disk_usage: DiskUsage | None = None,
    quarantine: Path | None = None,
) -> ExpirePlan:
    """What one pass of the broker's two clean services would delete now. Reads only.

    ``disk_usage(path) -> ratio`` gives a partition's used ratio as the broker computes it
    (default: measured); ``force`` is the manual mode of ``mqadmin deleteExpiredCommitLog``;
    ``quarantine``: the files are moved to a fresh folder inside it instead of being deleted.
    """
    settings = settings or expire_settings(st.config)
    rules = rules_for(settings.broker)
    dledger_usage = disk_usage or measured_disk_usage(settings.broker, rounds_up=rules.dledger_ratio_rounds_up)
    disk_usage = disk_usage or measured_disk_usage(settings.broker)
    triggers = evaluate_triggers(st, settings, now_ms=now_ms, force=force, disk_usage=disk_usage)
    segs = _segments(st)
    plain = [s for s in segs if s.framing is not DLEDGER]
    commitlog, stop = _plan_commitlog(st, plain, settings, triggers, now_ms)
    if not triggers.triggered:
        stop = (
            f"not triggered: local hour {triggers.local_hour:02d} is not in deleteWhen {settings.delete_when!r}, "
            f"disk {percent(triggers.commitlog_used_ratio)} used (commit log) / {percent(triggers.consumequeue_used_ratio)} "
            f"(consume queue) is not above diskMaxUsedSpaceRatio {settings.disk_max_used_space_ratio}%, no --force"
        )
    dl = _plan_dledger(st, segs, settings, triggers, now_ms, dledger_usage) if st.config.dledger else None
    if dl is not None:
        commitlog += dl.data
        stop = f"{stop}; {dl.stop}" if plain else dl.stop
    gone = {a.path for a in commitlog}
    rest = [s for s in segs if s.path not in gone]
    min_phy = segs[0].base_offset if segs else -1
    new_min = rest[0].base_offset if rest else -1
    cq: list[FileAction] = []
    index: list[FileAction] = []
    notes = list(settings.notes) + (dl.notes if dl is not None else [])
    warnings: list[str] = []
    if new_min > 0:  # CleanConsumeQueueService runs when the min offset moved past its start value 0
        cq, w = _plan_consumequeues(st, new_min)
        warnings += w
        index, n, w = _plan_index(st, new_min)
        notes += n
        warnings += w
    if triggers.disk_full:
        notes.append(
            f"disk above the warning level {percent(settings.disk_space_warning_level_ratio)}: a running broker "
            "would refuse new messages"
        )
    return ExpirePlan(
        store_root=st.root,
        now_ms=now_ms,
        settings=settings,
        triggers=triggers,
        min_phy_offset=min_phy,
        new_min_phy_offset=new_min,
        commitlog=tuple(commitlog),
        consumequeue=tuple(cq),
        index=tuple(index),
        commitlog_stop=stop,
        notes=tuple(notes),
        warnings=tuple(warnings),
        quarantine=quarantine,
        dledger_index=tuple(dl.index) if dl is not None else (),
        dledger=dl.cleaning if dl is not None else None,
    )


def percent(r: float) -> str:
    """A used ratio as the broker logs it, or "unknown" for -1 (path missing)."""
    return "unknown" if r < 0 else f"{r:.1%}"


def describe(plan: ExpirePlan) -> str:
    """One line saying why the plan is what it is."""
    if plan.nothing_to_do:
        return f"nothing to do: {plan.commitlog_stop}"
    parts = [f"{len(plan.commitlog)} commit log", f"{len(plan.consumequeue)} consume queue", f"{len(plan.index)} index"]
    if plan.dledger is not None:
        parts.insert(1, f"{len(plan.dledger_index)} DLedger index")
    moved = (
        f", min offset {plan.min_phy_offset} -> {plan.new_min_phy_offset}"
        if plan.new_min_phy_offset != plan.min_phy_offset
        else ""
    )
    return f"{', '.join(parts)} file(s), {plan.freed_size} bytes{moved}; commit log: {plan.commitlog_stop}"


def forced_clean_level(plan: ExpirePlan) -> float:
    """The level above which files go whatever their age: DLedger's own on a DLedger store."""
    return plan.dledger.force_clean_ratio if plan.dledger is not None else plan.settings.disk_space_clean_forcibly_ratio
