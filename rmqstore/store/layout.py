"""Store paths, broker.conf and segmented files (store-format.md §1, §2).

``broker.conf`` is a Java properties file; keys are setter names. Both the ``maped*`` (≤4.5.1)
and ``mapped*`` (≥4.5.2) spellings of the file-size keys are read. Relative paths are taken
relative to the directory of the properties file.
"""

from __future__ import annotations

import difflib
import os
import re
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from rmqstore.codec.consumequeue import effective_file_size
from rmqstore.codec.dledger import DEFAULT_INDEX_FILE_SIZE
from rmqstore.codec.framing import PLAIN, Framing
from rmqstore.codec.topic import BadTopic, queue_path_problem
from rmqstore.errors import ConfigError, FileAccessError
from rmqstore.problems import Problem, ProblemKind
from rmqstore.safety.openfile import check_link, check_regular, read_file

DEFAULT_DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
_UNIT_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
NAME_RE = re.compile(r"^\d{20}$")
INDEX_NAME_RE = re.compile(r"^\d{17}$")


class _UnderRoot:
    """A fixed path under the store root, read off a :class:`StoreConfig`."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __get__(self, cfg: StoreConfig, owner: type | None = None) -> Path:
        return cfg.store_root / self.name


@dataclass(frozen=True, slots=True)
class StoreConfig:
    """The store settings rmqstore needs, with the broker's defaults (§1.2)."""

    store_root: Path
    commitlog_dirs: tuple[Path, ...] = ()
    commitlog_file_size: int = 1073741824
    cq_file_size: int = 6_000_000  # effective: rounded up to a multiple of 20
    max_hash_slot_num: int = 5_000_000
    max_index_num: int = 20_000_000
    message_index_enable: bool = True
    message_index_safe: bool = False
    check_crc_on_recover: bool = True
    max_message_size: int = 4_194_304
    max_msgs_num_batch: int = 64
    default_query_max_num: int = 32
    file_reserved_time_h: int = 72
    delete_when: str = "04"
    disk_max_used_space_ratio: int = 75
    clean_file_forcibly_enable: bool = True
    delete_file_batch_max: int = 10
    disk_space_warning_level_ratio: float = 0.90
    disk_space_clean_forcibly_ratio: float = 0.85
    message_delay_level: str = DEFAULT_DELAY_LEVELS
    duplication_enable: bool = False
    enable_consume_queue_ext: bool = False
    flush_disk_type: str = "ASYNC_FLUSH"
    broker_role: str = "ASYNC_MASTER"
    broker_name: str = "broker-a"
    broker_cluster_name: str = "DefaultCluster"
    broker_ip: str | None = None
    listen_port: int = 10911
    default_topic_queue_nums: int = 8
    # 5.x / 4.9.3+ settings
    enable_lmq: bool = False
    enable_multi_dispatch: bool = False
    auto_message_version_on_topic_len: bool = True
    enabled_append_prop_crc: bool = False
    force_verify_prop_crc: bool = False
    bcq_file_size: int = 13_800_000  # mapperFileSizeBatchConsumeQueue, 300000 units of 46 bytes
    store_type: str = "default"  # storeType: defaultRocksDB keeps the consume queues in a RocksDB database
    # DLedger mode: the commit log is the data files of a DLedger member (dledger-<selfId>/)
    enable_dleger_commit_log: bool = False
    dleger_group: str = ""
    dleger_self_id: str = "n0"  # DLedgerConfig's default
    dleger_peers: str = ""
    dledger_data_paths: tuple[Path, ...] = ()  # storePathDLedgerCommitLog: where the data files go instead
    dledger_index_file_size: int = DEFAULT_INDEX_FILE_SIZE  # not a broker setting: taken from the files
    broker: str = "4.4.0"  # behaviour of this broker version is emulated
    source: Path | None = None  # the broker.conf read, if any
    explicit: frozenset[str] = field(default_factory=frozenset)  # keys set in broker.conf
    detection: Any = field(default=None, compare=False)  # detect.Detection: how ``broker`` was chosen

    @property
    def commitlog_dir(self) -> Path:
        return self.commitlog_dirs[0] if self.commitlog_dirs else self.store_root / "commitlog"

    @property
    def plain_commitlog_dirs(self) -> tuple[Path, ...]:
        """The directories of plain commit log files (in DLedger mode: the part written before it, if any)."""
        return self.commitlog_dirs or (self.commitlog_dir,)

    @property
    def dledger(self) -> bool:
        return self.enable_dleger_commit_log

    @property
    def dledger_dir(self) -> Path:
        """The DLedger member's directory: DLedgerConfig's ``<storeBaseDir>/dledger-<selfId>``."""
        return self.store_root / f"dledger-{self.dleger_self_id}"

    @property
    def dledger_data_dirs(self) -> tuple[Path, ...]:
        return self.dledger_data_paths or (self.dledger_dir / "data",)

    @property
    def dledger_index_dir(self) -> Path:
        return self.dledger_dir / "index"

    @property
    def dledger_checkpoint_path(self) -> Path:
        return self.dledger_dir / "checkpoint"

    @property
    def dledger_currterm_path(self) -> Path:
        return self.dledger_dir / "currterm"

    @property
    def log_dirs(self) -> tuple[Path, ...]:
        """Every directory of commit log files, plain first: in DLedger mode the member's data files
        follow a migrated store's old ``commitlog/`` (whose last file the engine closed with a blank)."""
        if not self.dledger:
            return self.plain_commitlog_dirs
        return self.plain_commitlog_dirs + self.dledger_data_dirs

    # StorePathConfigHelper's layout under the store root
    consumequeue_dir = _UnderRoot("consumequeue")
    index_dir = _UnderRoot("index")
    config_dir = _UnderRoot("config")
    checkpoint_path = _UnderRoot("checkpoint")
    abort_path = _UnderRoot("abort")
    lock_path = _UnderRoot("lock")

    def delay_levels_ms(self) -> list[int]:
        return parse_delay_levels(self.message_delay_level)

    def index_file_size(self) -> int:
        return 40 + self.max_hash_slot_num * 4 + self.max_index_num * 20


def parse_delay_levels(text: str) -> list[int]:
    """``messageDelayLevel`` -> delay of each level in ms (level i is item i-1)."""
    out = []
    for tok in text.split():
        unit = tok[-1]
        if unit not in _UNIT_MS or not tok[:-1].isdigit():
            raise ValueError(f"bad delay level {tok!r}")
        out.append(int(tok[:-1]) * _UNIT_MS[unit])
    return out


# key -> (StoreConfig field, type)
_KEYS: dict[str, tuple[str, type]] = {
    "storePathRootDir": ("store_root", Path),
    "storePathCommitLog": ("commitlog_dirs", Path),
    "mapedFileSizeCommitLog": ("commitlog_file_size", int),
    "mappedFileSizeCommitLog": ("commitlog_file_size", int),
    "mapedFileSizeConsumeQueue": ("cq_file_size", int),
    "mappedFileSizeConsumeQueue": ("cq_file_size", int),
    "maxHashSlotNum": ("max_hash_slot_num", int),
    "maxIndexNum": ("max_index_num", int),
    "messageIndexEnable": ("message_index_enable", bool),
    "messageIndexSafe": ("message_index_safe", bool),
    "checkCRCOnRecover": ("check_crc_on_recover", bool),
    "maxMessageSize": ("max_message_size", int),
    "maxMsgsNumBatch": ("max_msgs_num_batch", int),
    "defaultQueryMaxNum": ("default_query_max_num", int),
    "fileReservedTime": ("file_reserved_time_h", int),
    "deleteWhen": ("delete_when", str),
    "diskMaxUsedSpaceRatio": ("disk_max_used_space_ratio", int),
    "cleanFileForciblyEnable": ("clean_file_forcibly_enable", bool),
    "deleteFileBatchMax": ("delete_file_batch_max", int),
    "diskSpaceWarningLevelRatio": ("disk_space_warning_level_ratio", float),
    "diskSpaceCleanForciblyRatio": ("disk_space_clean_forcibly_ratio", float),
    "messageDelayLevel": ("message_delay_level", str),
    "duplicationEnable": ("duplication_enable", bool),
    "enableConsumeQueueExt": ("enable_consume_queue_ext", bool),
    "flushDiskType": ("flush_disk_type", str),
    "brokerRole": ("broker_role", str),
    "brokerName": ("broker_name", str),
    "brokerClusterName": ("broker_cluster_name", str),
    "brokerIP1": ("broker_ip", str),
    "listenPort": ("listen_port", int),
    "defaultTopicQueueNums": ("default_topic_queue_nums", int),
    "enableLmq": ("enable_lmq", bool),
    "enableMultiDispatch": ("enable_multi_dispatch", bool),
    "autoMessageVersionOnTopicLen": ("auto_message_version_on_topic_len", bool),
    "enabledAppendPropCRC": ("enabled_append_prop_crc", bool),
    "forceVerifyPropCRC": ("force_verify_prop_crc", bool),
    "mapperFileSizeBatchConsumeQueue": ("bcq_file_size", int),
    "storeType": ("store_type", str),
    "enableDLegerCommitLog": ("enable_dleger_commit_log", bool),
    "dLegerGroup": ("dleger_group", str),
    "dLegerSelfId": ("dleger_self_id", str),
    "dLegerPeers": ("dleger_peers", str),
    "storePathDLedgerCommitLog": ("dledger_data_paths", Path),
}
# Broker keys that do not size or move the store: accepted, ignored.
_OTHER_KNOWN = {
    "namesrvAddr",
    "brokerId",
    "deleteWhen",
    "brokerIP2",
    "autoCreateTopicEnable",
    "autoCreateSubscriptionGroup",
    "sendMessageThreadPoolNums",
    "pullMessageThreadPoolNums",
    "useReentrantLockWhenPutMessage",
    "waitTimeMillsInSendQueue",
    "transientStorePoolEnable",
    "warmMapedFileEnable",
    "flushCommitLogLeastPages",
    "flushConsumeQueueLeastPages",
    "cleanResourceInterval",
    "deleteCommitLogFilesInterval",
    "deleteConsumeQueueFilesInterval",
    "destroyMapedFileIntervalForcibly",
    "redeleteHangedFileInterval",
    "haListenPort",
    "haMasterAddress",
    "enablePropertyFilter",
    "filterServerNums",
    "traceTopicEnable",
    "msgTraceTopicName",
    "aclEnable",
    "storePathIndex",
    "storePathConsumeQueue",
    "readOnlyCommitLogStorePaths",
    "mappedFileSizeConsumeQueueExt",
    "bitMapLengthConsumeQueueExt",
    "enableCalcFilterBitMap",
    "timerWheelEnable",
    "enableCompaction",
    "fetchNamesrvAddrByAddressServer",
    "rejectTransactionMessage",
    "slaveReadEnable",
    "messageStoreSize",
    "osPageCacheBusyTimeOutMills",
    "brokerPermission",
    "clusterTopicEnable",
    "brokerTopicEnable",
    "defaultQueryMaxNum",
    "flushIntervalCommitLog",
    "flushIntervalConsumeQueue",
    "commitIntervalCommitLog",
    "maxTransferBytesOnMessageInMemory",
    "maxTransferCountOnMessageInMemory",
    "accessMessageInMemoryMaxRatio",
    "longPollingEnable",
    "notifyConsumerIdsChangedEnable",
    "transactionTimeOut",
    "transactionCheckMax",
    "transactionCheckInterval",
    "storePathEpochFile",
    "storePathBrokerIdentity",
    "enableControllerMode",
    "controllerAddr",
    "proxyMode",
    "flushConsumerOffsetInterval",
    "flushDelayOffsetInterval",
    "rocketmqHome",
    "mappedFileSizeTimerLog",
    "brokerVersion",
}


def read_java_properties(path: Path) -> dict[str, tuple[str, int]]:
    """Parse a Java properties file: key -> (value, line number). Raises ConfigError."""
    try:
        text = read_file(path).decode("latin-1")
    except OSError as e:
        raise ConfigError(f"cannot read: {e.strerror}", path=path) from None
    except FileAccessError as e:  # a directory or special file given as broker.conf
        raise ConfigError(f"cannot read: {str(e).removeprefix(f'{path}: ')}", path=path) from None
    out: dict[str, tuple[str, int]] = {}
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        start = i + 1
        line = lines[i].lstrip()
        i += 1
        if not line or line[0] in "#!":
            continue
        while _continues(line) and i < len(lines):
            line = line[:-1] + lines[i].lstrip()
            i += 1
        if _continues(line):
            line = line[:-1]
        m = re.match(r"((?:\\.|[^\s:=\\])*)\s*[:=]?\s*(.*)$", line)
        if not m:
            raise ConfigError(f"cannot parse line {line!r}", path=path, line=start)
        key = _unescape(m.group(1))
        out[key] = (_unescape(m.group(2)).rstrip(), start)
    return out


def _continues(line: str) -> bool:
    n = len(line) - len(line.rstrip("\\"))
    return n % 2 == 1


def _unescape(s: str) -> str:
    if "\\" not in s:
        return s
    out, i = [], 0
    while i < len(s):
        c = s[i]
        if c == "\\" and i + 1 < len(s):
            n = s[i + 1]
            if n == "u" and i + 5 < len(s) + 0 and re.fullmatch(r"[0-9a-fA-F]{4}", s[i + 2 : i + 6] or ""):
                out.append(chr(int(s[i + 2 : i + 6], 16)))
                i += 6
                continue
            out.append({"t": "\t", "n": "\n", "r": "\r", "f": "\f"}.get(n, n))
            i += 2
            continue
        out.append(c)
        i += 1
    return "".join(out)


def load_broker_config(path: Path, *, store_root: Path | None = None, broker: str | None = None) -> StoreConfig:
    """Read a broker.conf; ``store_root`` overrides ``storePathRootDir``. Raises ConfigError."""
    path = Path(path)
    props = read_java_properties(path)
    base = path.resolve().parent
    values: dict[str, object] = {}
    explicit = set()
    spelled: dict[str, tuple[str, str]] = {}
    for key, (raw, line) in props.items():
        if key not in _KEYS:
            if key not in _OTHER_KNOWN:
                close = difflib.get_close_matches(key, list(_KEYS), n=1, cutoff=0.85)
                if close:
                    raise ConfigError(f"unknown key {key!r} (did you mean {close[0]!r}?)", path=path, line=line)
            continue
        attr, typ = _KEYS[key]
        try:
            if typ is int:
                value: object = int(raw.strip())
            elif typ is float:
                value = float(raw.strip())
            elif typ is bool:
                value = raw.strip().lower() == "true"  # Boolean.parseBoolean
            elif typ is Path:
                if attr in ("commitlog_dirs", "dledger_data_paths"):
                    value = tuple(_resolve(base, p) for p in raw.split(",") if p.strip())
                else:
                    value = _resolve(base, raw)
            else:
                value = raw.strip()
        except ValueError:
            raise ConfigError(f"{key}={raw!r} is not a valid {typ.__name__}", path=path, line=line) from None
        if attr in spelled and values.get(attr) != value:
            other = spelled[attr][0]
            raise ConfigError(f"{key} and {other} disagree ({value} vs {values[attr]})", path=path, line=line)
        spelled[attr] = (key, raw)
        values[attr] = value
        explicit.add(key)
    root = Path(store_root) if store_root is not None else values.pop("store_root", None)
    values.pop("store_root", None)
    if root is None:
        raise ConfigError("storePathRootDir is not set; pass the store directory", path=path)
    if "cq_file_size" in values:
        values["cq_file_size"] = effective_file_size(int(values["cq_file_size"]))  # type: ignore[arg-type]
    if broker:
        values["broker"] = broker
    cfg = StoreConfig(store_root=Path(root), source=path, explicit=frozenset(explicit), **values)  # type: ignore[arg-type]
    _check_ranges(cfg, path)
    return cfg


def _resolve(base: Path, p: str) -> Path:
    p = os.path.expanduser(p.strip())
    q = Path(p)
    return q if q.is_absolute() else (base / q)


def _check_ranges(cfg: StoreConfig, path: Path) -> None:
    for name, v in (
        ("mappedFileSizeCommitLog", cfg.commitlog_file_size),
        ("mappedFileSizeConsumeQueue", cfg.cq_file_size),
        ("maxHashSlotNum", cfg.max_hash_slot_num),
        ("maxIndexNum", cfg.max_index_num),
    ):
        if v <= 0:
            raise ConfigError(f"{name} must be positive, got {v}", path=path)


def find_broker_config(store_root: Path) -> Path | None:
    """A broker.conf that belongs to this store: ``<store>/broker.conf`` or ``<store>/../broker.conf``
    whose storePathRootDir points back at the store."""
    store_root = Path(store_root)
    inside = store_root / "broker.conf"
    if inside.is_file():
        return inside
    beside = store_root.parent / "broker.conf"
    if beside.is_file():
        try:
            props = read_java_properties(beside)
        except ConfigError:
            return None
        root = props.get("storePathRootDir")
        if root and _resolve(beside.resolve().parent, root[0]).resolve() == store_root.resolve():
            return beside
    return None


def file_name(offset: int) -> str:
    """``UtilAll.offset2FileName``: 20-digit zero-padded decimal."""
    return f"{offset:020d}"


@dataclass(frozen=True, slots=True)
class Segment:
    """One file of a segmented log, named by the global offset of its first byte."""

    path: Path
    base_offset: int
    size: int  # the file's length on disk
    framing: Framing = PLAIN  # how a commit log file holds its records (queue files: unused)

    @property
    def end_offset(self) -> int:
        return self.base_offset + self.size


def log_segments(cfg: StoreConfig, framing: Framing, expected_size: int | None) -> tuple[list[Segment], list[Problem]]:
    """The files of the commit log chain in offset order, each with its framing: ``framing`` for the
    store's own log, plain files for the part a DLedger store kept from before it was migrated."""
    segs: list[Segment] = []
    problems: list[Problem] = []
    for d in cfg.log_dirs:
        f = framing if cfg.dledger == (d in cfg.dledger_data_dirs) else PLAIN
        s, p = list_segments(d, expected_size)
        segs += s if f is PLAIN else [replace(x, framing=f) for x in s]
        problems += p
    segs.sort(key=lambda s: s.base_offset)
    return segs, problems


def list_segments(directory: Path, expected_size: int | None) -> tuple[list[Segment], list[Problem]]:
    """The files of a commit log or consume queue directory, sorted as the broker loads them,
    with every naming, size and continuity problem found (§2.4)."""
    problems: list[Problem] = []
    segs: list[Segment] = []
    try:
        names = sorted(os.listdir(directory))
    except FileNotFoundError:
        return [], []
    except OSError as e:
        return [], [Problem(directory, None, f"cannot list: {e.strerror}", kind=ProblemKind.UNLISTABLE)]
    for name in names:
        p = Path(directory, name)
        if name.startswith("."):
            problems.append(
                Problem(
                    p,
                    None,
                    "hidden file in a segment directory (the broker would try to load it)",
                    kind=ProblemKind.HIDDEN_FILE,
                )
            )
            continue
        if p.is_dir():
            problems.append(Problem(p, None, "sub-directory in a segment directory", kind=ProblemKind.SUB_DIRECTORY))
            continue
        if not NAME_RE.match(name):
            problems.append(
                Problem(
                    p,
                    None,
                    "file name is not a 20-digit offset: the broker fails to load",
                    kind=ProblemKind.BAD_NAME,
                )
            )
            continue
        try:
            st = os.lstat(p)
            if stat.S_ISLNK(st.st_mode):
                check_link(p)  # a segment leading out of the store is never read or written
                st = os.stat(p)
        except OSError as e:
            problems.append(Problem(p, None, f"cannot stat: {e.strerror}", kind=ProblemKind.UNSTATABLE))
            continue
        if not stat.S_ISREG(st.st_mode):
            check_regular(p)  # a FIFO or device among the segments: named, exit 6, before any read
        size = st.st_size
        segs.append(Segment(p, int(name), size))
    for i, s in enumerate(segs):
        if expected_size is not None and s.size != expected_size:
            last = i == len(segs) - 1
            problems.append(
                Problem(
                    s.path,
                    None,
                    f"file is {s.size} bytes, configured size is {expected_size}"
                    + (" (empty last file)" if last and s.size == 0 else ""),
                    kind=ProblemKind.WRONG_SIZE,
                )
            )
        if expected_size and s.base_offset % expected_size:
            problems.append(
                Problem(
                    s.path,
                    None,
                    f"name {s.base_offset} is not a multiple of the file size",
                    kind=ProblemKind.MISALIGNED_NAME,
                )
            )
        if i and expected_size is not None and s.base_offset != segs[i - 1].base_offset + expected_size:
            problems.append(
                Problem(
                    s.path,
                    None,
                    f"gap: previous file ends at {segs[i - 1].base_offset + expected_size}, this one starts at "
                    f"{s.base_offset}",
                    kind=ProblemKind.GAP,
                )
            )
    return segs, problems


def segment_for(segs: list[Segment], offset: int, file_size: int) -> Segment | None:
    """The segment holding global ``offset`` (§2.3), or None."""
    if not segs:
        return None
    first = segs[0].base_offset
    idx = offset // file_size - first // file_size
    if 0 <= idx < len(segs) and segs[idx].base_offset <= offset < segs[idx].base_offset + file_size:
        return segs[idx]
    for s in segs:
        if s.base_offset <= offset < s.base_offset + file_size:
            return s
    return None


def segment_ranges(
    segments: list[Segment], from_phy: int = 0, to_phy: int | None = None
) -> Iterator[tuple[Segment, int, int]]:
    """The files that hold commit log offsets [from_phy, to_phy), in order, each with the byte range
    of it inside that span: (segment, start, end)."""
    for seg in segments:
        if seg.base_offset + seg.size <= from_phy:
            continue
        if to_phy is not None and seg.base_offset >= to_phy:
            break
        end = seg.size if to_phy is None else min(seg.size, to_phy - seg.base_offset)
        yield seg, max(0, from_phy - seg.base_offset), end


def queue_dir(
    root: Path,
    topic: str,
    queue_id: int,
    *,
    where: tuple[Path | str, int, int | None] | None = None,
    under: str = "consumequeue",
) -> Path:
    """``<root>/<under>/<topic>/<queueId>``, refused (:class:`BadTopic`) for a name that is not one safe
    directory name (:func:`queue_path_problem`), and proven to stay inside ``<root>/<under>``
    (``consumequeue`` or ``batchconsumequeue``).

    ``where`` is (file, pos, phy offset) of the record the topic came from, for the error.
    """
    why = queue_path_problem(topic, queue_id)
    base = Path(root) / under
    d = base / topic / str(int(queue_id))
    if why is None and os.path.normpath(d).startswith(os.path.normpath(base) + os.sep) and d.parent.parent == base:
        return d
    path, pos, phy = where if where is not None else (base, 0, None)
    raise BadTopic(topic, why or "the path leaves the consume queue directory", path=path, pos=pos, phy_offset=phy)


def record_place(commitlog_dir: Path, file_size: int, phy_offset: int) -> tuple[Path, int, int]:
    """(commit log file, byte position in it, phy offset) of a record."""
    base = phy_offset - phy_offset % file_size if file_size > 0 else 0
    return Path(commitlog_dir) / f"{base:020d}", phy_offset - base, phy_offset
