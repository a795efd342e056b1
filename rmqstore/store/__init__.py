"""A store directory: opening it (settings, version, lock), its files, and how its commit log is framed.

The package holds what a store *is*: ``layout`` (broker.conf, settings, segment lists), ``config``
(the config/*.json files), ``detect`` (which broker version wrote it), ``files`` (mapping files),
``queues`` (consume queue tails). ``open_store`` is the single entry point used by every operation. A writable open takes the
same exclusive POSIX record lock the broker takes on ``lock`` (byte 0, length 1, §7) and keeps
it until the store is closed, so a broker cannot start underneath us and we never modify a store
a running broker holds.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

from rmqstore.codec import checkpoint as cpmod
from rmqstore.codec.dledger import DLEDGER
from rmqstore.codec.framing import PLAIN, Framing
from rmqstore.errors import (
    ConfigError,
    CorruptData,
    FileAccessError,
    StoreLocked,
    StoreNotFound,
    UnsafePlan,
    UsageError,
    from_os_error,
)
from rmqstore.problems import Problem
from rmqstore.safety.files import SCRATCH_DIR, read_if_present, remove_stale_tmp
from rmqstore.safety.journal import pending
from rmqstore.safety.openfile import check_regular, open_fd
from rmqstore.store.detect import require_settled
from rmqstore.store.detect import resolve as resolve_version
from rmqstore.store.layout import (
    INDEX_NAME_RE,
    Segment,
    StoreConfig,
    find_broker_config,
    load_broker_config,
    log_segments,
)
from rmqstore.store.queue.batchconsumequeue import BatchConsumeQueues
from rmqstore.store.queue.interface import ConsumeQueueStore
from rmqstore.store.queue.kinds import consume_queue_store


def lock_holder_pid(lock_path: Path) -> int | None:
    """PID of the process holding the broker's fcntl lock on byte 0 of ``lock``, else None.

    Probes with F_GETLK, which neither takes the lock nor disturbs locks this process holds.
    """
    try:
        fd = os.open(lock_path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    except OSError:
        return None  # missing, or a link or special file that open_store refuses by name
    try:
        probe = struct.pack("hhqqi", fcntl.F_WRLCK, os.SEEK_SET, 0, 1, 0)
        res = fcntl.fcntl(fd, fcntl.F_GETLK, probe)
        l_type, _, _, _, l_pid = struct.unpack("hhqqi", res)
        return l_pid if l_type != fcntl.F_UNLCK else None
    finally:
        os.close(fd)


def commitlog_framing(cfg: StoreConfig) -> Framing:
    """How the commit log files of the store hold their records: in DLedger entries (DLedger mode),
    else one after another (plain files)."""
    return DLEDGER if cfg.dledger else PLAIN


@dataclass
class Store:
    """An opened store. Use :func:`open_store`."""

    config: StoreConfig
    writable: bool = False
    _lock_fd: int | None = None
    # the store's queues: consumequeue/ (the one every topic but a BatchCQ one has) and batchconsumequeue/
    consume_queues: ConsumeQueueStore = field(init=False, repr=False)
    batch_queues: BatchConsumeQueues = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.consume_queues = consume_queue_store(self.config, self.config.store_root)
        self.batch_queues = BatchConsumeQueues(self.config, self.config.store_root)

    @property
    def root(self) -> Path:
        return self.config.store_root

    # -- markers -----------------------------------------------------------------
    def abort_exists(self) -> bool:
        return self.config.abort_path.exists()

    def lock_holder(self) -> int | None:
        if self._lock_fd is not None:
            return None  # we hold it ourselves
        return lock_holder_pid(self.config.lock_path)

    def read_checkpoint(self) -> cpmod.Checkpoint | None:
        p = self.config.checkpoint_path
        data = read_if_present(p, "checkpoint")
        if data is None:
            return None
        if len(data) != cpmod.FILE_SIZE:
            raise CorruptData(f"checkpoint is {len(data)} bytes, expected {cpmod.FILE_SIZE}", path=p, pos=len(data))
        return cpmod.decode(data, path=str(p))

    # -- files -------------------------------------------------------------------
    @property
    def framing(self) -> Framing:
        """How the store's commit log files hold their records."""
        return commitlog_framing(self.config)

    def commitlog_segments(self) -> tuple[list[Segment], list[Problem]]:
        return log_segments(self.config, self.framing, self.config.commitlog_file_size)

    def min_phy_offset(self) -> int:
        """The commit log's min offset: the first file's start (0 without files)."""
        segs, _ = self.commitlog_segments()
        return segs[0].base_offset if segs else 0

    def index_files(self) -> tuple[list[Path], list[Problem]]:
        d = self.config.index_dir
        try:
            names = sorted(os.listdir(d))
        except FileNotFoundError:
            return [], []
        files, problems = [], []
        for n in names:
            p = d / n
            if not n.isdigit():
                problems.append(Problem(p, None, "index file name is not a number (the broker skips it)", "warning"))
                continue
            if not INDEX_NAME_RE.match(n):
                problems.append(Problem(p, None, "index file name is not yyyyMMddHHmmssSSS", "warning"))
            files.append(p)
        return files, problems

    # -- reading -----------------------------------------------------------------
    def close(self) -> None:
        self.consume_queues.close()
        if self._lock_fd is not None:
            with contextlib.suppress(OSError):
                fcntl.lockf(self._lock_fd, fcntl.LOCK_UN, 1, 0)
            os.close(self._lock_fd)
            self._lock_fd = None


def resolve_config(root: Path, broker_config: Path | None, broker: str | None) -> StoreConfig:
    """Settings for ``root``: from ``broker_config``, else a broker.conf found beside the store,
    else the broker defaults with file sizes taken from the files on disk."""
    root = Path(root)
    if not root.exists():
        raise StoreNotFound(f"{root}: no such directory")
    if not root.is_dir():
        raise StoreNotFound(f"{root}: not a directory")
    conf = Path(broker_config) if broker_config else find_broker_config(root)
    if conf is not None:
        if not conf.exists():
            # the store may be fine: the file named is what is missing (exit 1, not "not a store")
            raise ConfigError("broker config file not found", path=conf)
        cfg = load_broker_config(conf, store_root=root)
    else:
        cfg = StoreConfig(store_root=root)
    cfg = _infer_sizes(_infer_dledger(cfg))
    try:
        det = resolve_version(cfg, broker, commitlog_framing(cfg))
    except ValueError as e:
        raise UsageError(f"--broker-version: {e}") from None
    return replace(cfg, broker=det.broker, detection=det)


def _infer_dledger(cfg: StoreConfig) -> StoreConfig:
    """Without a broker.conf that says, a store holding one DLedger member directory is in DLedger mode."""
    if "enableDLegerCommitLog" in cfg.explicit:
        return cfg
    try:
        members = sorted(p.name for p in cfg.store_root.glob("dledger-*") if any(_file_sizes(p / "data")))
    except OSError:
        return cfg
    if len(members) != 1:
        return cfg
    self_id = members[0].removeprefix("dledger-")
    if "dLegerSelfId" in cfg.explicit and cfg.dleger_self_id != self_id:
        return cfg
    return replace(cfg, enable_dleger_commit_log=True, dleger_self_id=self_id)


def _file_sizes(d: Path) -> list[int]:
    """The sizes of the non-empty numbered files in ``d`` (none if it cannot be listed)."""
    with contextlib.suppress(OSError):
        sizes = [os.path.getsize(d / n) for n in sorted(os.listdir(d)) if n.isdigit()]
        return [s for s in sizes if s > 0]
    return []


def _infer_sizes(cfg: StoreConfig) -> StoreConfig:
    """Without explicit sizes, use what the files on disk say (all segments of a log have one size)."""
    updates: dict[str, object] = {}
    if not ({"mapedFileSizeCommitLog", "mappedFileSizeCommitLog"} & cfg.explicit):
        sizes = [s for d in cfg.log_dirs for s in _file_sizes(d)]
        if sizes:
            updates["commitlog_file_size"] = max(set(sizes), key=sizes.count)
    if cfg.dledger:
        sizes = _file_sizes(cfg.dledger_index_dir)
        if sizes:
            updates["dledger_index_file_size"] = max(sizes)
    if not ({"mapedFileSizeConsumeQueue", "mappedFileSizeConsumeQueue"} & cfg.explicit):
        with contextlib.suppress(OSError):
            for tdir in sorted(cfg.consumequeue_dir.iterdir()):
                found = False
                for qdir in sorted(tdir.iterdir()) if tdir.is_dir() else []:
                    files = sorted(f for f in os.listdir(qdir) if f.isdigit()) if qdir.is_dir() else []
                    if len(files) > 1:  # the last file may be anything; an earlier one is full size
                        updates["cq_file_size"] = os.path.getsize(qdir / files[0])
                        found = True
                        break
                    if files and "cq_file_size" not in updates:
                        updates["cq_file_size"] = os.path.getsize(qdir / files[0])
                if found:
                    break
    if not ({"maxHashSlotNum", "maxIndexNum"} & cfg.explicit):
        with contextlib.suppress(OSError):
            files = sorted(f for f in os.listdir(cfg.index_dir) if f.isdigit())
            if files:
                size = os.path.getsize(cfg.index_dir / files[0])
                guess = _guess_index_dims(size)
                if guess:
                    updates["max_hash_slot_num"], updates["max_index_num"] = guess
    return replace(cfg, **updates) if updates else cfg  # type: ignore[arg-type]


def _guess_index_dims(size: int) -> tuple[int, int] | None:
    """(slots, entries) for an index file size: the default, or the usual 1:4 ratio."""
    if size == 40 + 5_000_000 * 4 + 20_000_000 * 20:
        return 5_000_000, 20_000_000
    # slots*4 + entries*20 with entries = 4*slots -> 84*slots
    if (size - 40) % 84 == 0:
        s = (size - 40) // 84
        return s, 4 * s
    return None


def looks_like_store(root: Path, cfg: StoreConfig) -> bool:
    markers = [*cfg.log_dirs, root / "consumequeue", root / "index", root / "checkpoint", root / "config"]
    return any(p.exists() for p in markers)


@contextlib.contextmanager
def open_store(
    root: Path | str,
    *,
    broker_config: Path | str | None = None,
    writable: bool = False,
    broker: str | None = None,
    create: bool = False,
    operation: str | None = None,
    dry_run: bool = False,
) -> Iterator[Store]:
    """Open a store; with ``writable`` take the broker's lock first (StoreLocked if held).

    ``dry_run`` opens it read-only for a plan that is shown and not applied, refused (StoreLocked)
    like the real run while a broker holds the lock: the plan of a store in use is not one.

    A writable open is refused (UnsafePlan) while another operation's journal shows it was
    interrupted: that operation must be re-run to finish first. ``operation`` names the caller
    (``write``, ``recover``, ``redispatch``) so it can resume its own journal."""
    root = Path(root)
    if create:
        root.mkdir(parents=True, exist_ok=True)
    cfg = resolve_config(root, Path(broker_config) if broker_config else None, broker)
    if not create and not looks_like_store(root, cfg):
        raise StoreNotFound(f"{root}: not a RocketMQ store (no commitlog/, consumequeue/, index/ or checkpoint)")
    check_marker_files(cfg)
    if writable or operation is not None:
        check_readable(cfg)
    if writable and not dry_run and operation is not None:
        require_settled(cfg.detection, operation, root)
    st = Store(cfg, writable and not dry_run)
    holder = st.lock_holder() if dry_run else None
    if holder is not None:
        raise locked_error(cfg.lock_path, holder)
    if st.writable:
        st._lock_fd = _take_lock(cfg.lock_path)
        try:
            _remove_stale_tmp(cfg)
            _refuse_unfinished(root, operation)
        except UnsafePlan:
            st.close()
            raise
    try:
        yield st
    finally:
        st.close()


def _remove_stale_tmp(cfg: StoreConfig) -> None:
    """Temp files of runs killed before their rename (this run holds the lock: none is in use)."""
    root = cfg.store_root
    for d in (root, cfg.config_dir, root / SCRATCH_DIR, root / SCRATCH_DIR / "tmp"):
        if d.is_dir() and not d.is_symlink():
            remove_stale_tmp(d)


def _refuse_unfinished(root: Path, operation: str | None) -> None:

    for pj in pending(root):
        if pj.operation != operation:
            raise UnsafePlan(f"{root}: {pj}; run `rmqstore {pj.operation} {root}` again to finish it first")


def describe_holder(pid: int | None) -> str:
    """Who holds the lock, in words: another rmqstore run (named) or a running broker."""
    if not pid:
        return "a running broker"
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        argv = []
    words = [a.decode("utf-8", "replace") for a in argv if a]
    for i, w in enumerate(words):
        if Path(w).name == "rmqstore" or w.endswith("rmqstore/__main__.py") or w == "commands":
            sub = next((x for x in words[i + 1 :] if not x.startswith("-")), "")
            return f"another rmqstore run (pid {pid}: rmqstore {sub})".replace(" )", ")")
    return f"a running broker (pid {pid})"


def locked_error(lock_path: Path, pid: int | None, hint: str = "") -> StoreLocked:
    who = describe_holder(pid)
    then = "wait for it to finish" if who.startswith("another rmqstore") else "stop it first"
    return StoreLocked(f"{lock_path}: held by {who}; {then}{hint}")


def _take_lock(lock_path: Path) -> int:
    try:
        fd = open_fd(lock_path, os.O_RDWR | os.O_CREAT)
    except OSError as e:
        raise from_os_error(e, lock_path, doing="open the lock file for writing") from None
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)
    except OSError as e:
        os.close(fd)
        if e.errno in (errno.EAGAIN, errno.EACCES):
            raise locked_error(lock_path, lock_holder_pid(lock_path)) from None
        raise
    return fd


def check_marker_files(cfg: StoreConfig) -> None:
    """The store root's own files (``lock``, ``abort``, ``checkpoint``) are regular files in the
    store, or absent: a FIFO there blocks every reader, a link out of the store takes writes out."""
    for path in (cfg.lock_path, cfg.abort_path, cfg.checkpoint_path):
        if not path.is_dir():  # a directory there is named by the step that needs the file
            check_regular(path, cfg.store_root)


def check_readable(cfg: StoreConfig) -> None:
    """Every directory an operation reads must be listable: an unreadable one is never "empty"."""
    for d in (cfg.commitlog_dir, cfg.consumequeue_dir, cfg.index_dir):
        try:
            if not d.exists():
                continue
            if not d.is_dir():
                raise FileAccessError(
                    f"{d}: is not a directory; the store's {d.name} directory was expected",
                    path=d,
                    errno_=errno.ENOTDIR,
                    exit_code=6,
                )
            os.listdir(d)
        except OSError as e:
            raise from_os_error(e, d, doing="list the store's files") from None
        if not os.access(d, os.R_OK | os.X_OK):
            raise FileAccessError(
                f"{d}: permission denied; read access to the directory is needed",
                path=d,
                errno_=errno.EACCES,
                exit_code=1,
            )
