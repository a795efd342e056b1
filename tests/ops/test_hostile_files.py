"""Hostile files in copies of the real stores: FIFOs, devices and links in place of store files,
links out of the store, full disks, endless and sparse files, deep JSON, failing index rolls and
write rollbacks.

Every run goes through the real command line in a child process under a time limit (a hang fails)
and must end with a code from the README's table, one line naming the path, no traceback, no
"internal error", and nothing created or written outside the store.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import REPO, copy_real_store

from rmqstore.errors import EXIT_CODES
from rmqstore.safety.openfile import TooDeep, json_loads

LIMIT = 120  # seconds: far above any of these runs; a blocked open or an endless loop hits it
CODE = "import sys; from rmqstore.cli import main; sys.argv[0] = 'rmqstore'; main()"


def rmq(*args: object, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    p = subprocess.run(
        [sys.executable, "-c", CODE, *map(str, args)],
        capture_output=True,
        text=True,
        timeout=LIMIT,
        stdin=subprocess.DEVNULL,
        cwd=REPO,
        env={**os.environ, **(env or {})},
    )
    out = p.stdout + p.stderr
    assert p.returncode in EXIT_CODES, (args, p.returncode, out)
    assert "Traceback" not in out and "internal error" not in out, out
    return p


def error_line(p: subprocess.CompletedProcess[str]) -> str:
    lines = [ln for ln in p.stderr.splitlines() if ln.startswith("error: ")]
    assert len(lines) == 1, p.stderr
    return lines[0]


def snapshot(top: Path) -> dict[str, str]:
    """Every file under ``top`` (links as links) and the sha256 of its bytes."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(top):
        for n in dirnames + filenames:
            p = Path(dirpath, n)
            rel = str(p.relative_to(top))
            if p.is_symlink():
                out[rel] = "-> " + os.readlink(p)
            elif p.is_file():
                out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
            else:
                out[rel] = "dir"
    return out


def assert_no_errors(root: Path) -> None:
    """``check --quick`` finds no error (a crashed store keeps its warnings, exit 3 with 0 errors)."""
    p = rmq("check", root, "--quick")
    assert p.returncode == 0 or (p.returncode == 3 and "found 0 error(s)" in p.stderr), p.stdout + p.stderr


def last(d: Path) -> Path:
    return sorted(p for p in d.iterdir() if p.name.isdigit())[-1]


# ------------------------------------------------------------ FIFOs and devices in place of files

FIFO_PLACES = {
    "checkpoint": lambda r: r / "checkpoint",
    "lock": lambda r: r / "lock",
    "abort": lambda r: r / "abort",
    "topics.json": lambda r: r / "config" / "topics.json",
    "consumerOffset.json": lambda r: r / "config" / "consumerOffset.json",
    "index": lambda r: last(r / "index"),
    "consumequeue": lambda r: last(r / "consumequeue" / "TopicA" / "0"),
    "commitlog": lambda r: last(r / "commitlog"),
}


@pytest.mark.parametrize("place", list(FIFO_PLACES))
def test_a_fifo_in_place_of_a_store_file_is_named_never_waited_on(tmp_path: Path, place: str) -> None:
    root = copy_real_store("clean-2topics", tmp_path / "s")
    path = FIFO_PLACES[place](root)
    path.parent.mkdir(exist_ok=True)
    path.unlink(missing_ok=True)
    os.mkfifo(path)
    for argv in (["check", root], ["recover", root, "-q", "--quarantine", tmp_path / "q"]):
        p = rmq(*argv)
        if place == "consumerOffset.json" and argv[0] == "recover":
            assert p.returncode == 0  # recover never reads consumer offsets
            continue
        assert p.returncode == 6, p.stderr
        assert f"{path}: is a FIFO" in error_line(p)


@pytest.mark.parametrize("how", ["link", "device"])
def test_dev_zero_as_a_commit_log_file_is_refused_not_copied(tmp_path: Path, how: str) -> None:
    root = copy_real_store("crash-midwrite", tmp_path / "s")
    f = last(root / "commitlog")
    f.unlink()
    if how == "link":
        f.symlink_to("/dev/zero")
    else:
        try:
            os.mknod(f, 0o644 | 0o020000, os.makedev(1, 5))
        except PermissionError:
            pytest.skip("creating a character device needs CAP_MKNOD")
    for argv in (["check", root], ["recover", root, "-q", "--quarantine", tmp_path / "q"]):
        p = rmq(*argv)
        assert p.returncode == 6 and str(f) in error_line(p), p.stderr
    assert sum(x.stat().st_size for x in (tmp_path / "q").rglob("*") if x.is_file()) < 1 << 20


def test_a_directory_in_place_of_an_index_file_is_named(tmp_path: Path) -> None:
    root = copy_real_store("clean-2topics", tmp_path / "s")
    f = last(root / "index")
    f.unlink()
    f.mkdir()
    for argv in (["check", root], ["dump", "index", root], ["expire", root, "--force", "--dry-run"]):
        p = rmq(*argv)
        if p.returncode not in (0, 9):
            assert str(f) in error_line(p)


# ------------------------------------------------------------------------ links out of the store

LINKS_OUT = {
    "lock": lambda r, out: (r / "lock", out / "nologin", False),
    "consumequeue": lambda r, out: (last(r / "consumequeue" / "TopicA" / "0"), out / "cq", True),
    "commitlog": lambda r, out: (last(r / "commitlog"), out / "cl", True),
    "checkpoint": lambda r, out: (r / "checkpoint", out / "checkpoint", True),
}
MODIFYING = [
    ["recover", "{root}", "-q", "--quarantine", "{q}"],
    ["redispatch", "{root}", "-q", "--quarantine", "{q}"],
    ["write", "{root}", "--topic", "TopicA", "--body", "x", "--quarantine", "{q}"],
    ["expire", "{root}", "--force", "--quarantine", "{q}"],
]


@pytest.mark.parametrize("place", list(LINKS_OUT))
def test_nothing_outside_the_store_is_written_through_a_link(tmp_path: Path, place: str) -> None:
    for n, argv in enumerate(MODIFYING):
        root = copy_real_store("crash-midwrite", tmp_path / f"s{n}")
        out = tmp_path / f"out{n}"
        out.mkdir()
        link, target, move = LINKS_OUT[place](root, out)
        if move:
            shutil.move(link, target)
        else:
            link.unlink(missing_ok=True)
        link.symlink_to(target)
        before = snapshot(out)
        p = rmq(*[a.format(root=root, q=tmp_path / f"q{n}") for a in argv])
        assert snapshot(out) == before, (argv, p.stderr)
        if argv[0] != "expire":  # expire reads only the files it deletes, and a link is deleted as a link
            assert p.returncode == 6 and f"{link}: is a symbolic link" in error_line(p), p.stderr


def test_a_scratch_directory_linked_out_of_the_store_gets_nothing(tmp_path: Path) -> None:
    root = copy_real_store("crash-midwrite", tmp_path / "s")
    out = tmp_path / "out"
    out.mkdir()
    (root / ".rmqstore").symlink_to(out)
    for argv in (["write", root, "--topic", "TopicA", "--body", "x"], ["redispatch", root, "-q"]):
        p = rmq(*argv, "--quarantine", tmp_path / "q")
        assert p.returncode == 6 and f"{root / '.rmqstore'}: is a symbolic link" in error_line(p)
    assert not any(out.iterdir())


def test_links_inside_the_store_and_linked_directories_still_work(tmp_path: Path) -> None:
    root = copy_real_store("clean-2topics", tmp_path / "s")
    elsewhere = tmp_path / "disk2" / "commitlog"
    elsewhere.parent.mkdir()
    shutil.move(root / "commitlog", elsewhere)
    (root / "commitlog").symlink_to(elsewhere)  # the broker follows a linked commitlog/ directory
    assert_no_errors(root)
    assert rmq("write", root, "--topic", "TopicA", "--body", "x", "--quarantine", tmp_path / "q").returncode == 0
    assert_no_errors(root)


# ------------------------------------------------------------------------------ sparse files


_PEAK = "peak-kib="
# a fresh parent for one run: its children's peak is that run's alone (this process's counts every test's)
_MEASURED = (
    "import resource, subprocess, sys; p = subprocess.run(sys.argv[1:]); "
    f"print('{_PEAK}%d' % resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr); "
    "sys.exit(p.returncode)"
)


def _rmq_peak(*args: object) -> tuple[subprocess.CompletedProcess[str], int]:
    """``rmq`` run under a parent of its own, with the peak resident KiB of that run."""
    p = subprocess.run(
        [sys.executable, "-c", _MEASURED, sys.executable, "-c", CODE, *map(str, args)],
        capture_output=True,
        text=True,
        timeout=LIMIT,
        stdin=subprocess.DEVNULL,
        cwd=REPO,
    )
    body, _, peak = p.stderr.rpartition(_PEAK)
    p.stderr = body
    out = p.stdout + p.stderr
    assert p.returncode in EXIT_CODES, (args, p.returncode, out)
    assert "Traceback" not in out and "internal error" not in out, out
    return p, int(peak)


def test_a_one_terabyte_sparse_commit_log_is_walked_by_its_data(tmp_path: Path) -> None:
    root = tmp_path / "store"
    (root / "commitlog").mkdir(parents=True)
    f = root / "commitlog" / ("0" * 20)
    with open(f, "wb") as fh:
        fh.truncate(1 << 40)
        fh.seek(1 << 30)
        fh.write(os.urandom(1000))
    p, peak = _rmq_peak("dump", "commitlog", root, "--count")
    assert p.returncode == 3 and "bytes skipped" in p.stderr
    assert peak < 300 * 1024


def test_a_one_terabyte_sparse_timer_wheel_lists_its_used_slots(tmp_path: Path) -> None:
    root = copy_real_store("5.2.0/clean-5x-mixed", tmp_path / "s")
    wheel = root / "timerwheel"
    used = [5, 7, (1 << 40) // 32 - 3]
    with open(wheel, "wb") as fh:
        fh.truncate(1 << 40)
        for i in used:
            fh.seek(i * 32)
            fh.write((1700000000000 + i).to_bytes(8, "big") + bytes(20) + b"\0\0\0\1")
    p, peak = _rmq_peak("dump", "timer", root, "-f", "ndjson")
    assert p.returncode == 0, p.stderr
    assert [json.loads(ln)["slot"] for ln in p.stdout.splitlines()] == used
    assert peak < 300 * 1024


# --------------------------------------------------------------------------------- deep JSON


def _deep(n: int) -> str:
    return '{"a":' * n + "1" + "}" * n


@pytest.mark.parametrize("name", ["topics.json", "subscriptionGroup.json", "delayOffset.json", "consumerOffset.json"])
def test_config_files_nested_too_deep_are_damage_not_a_crash(tmp_path: Path, name: str) -> None:
    root = copy_real_store("clean-2topics", tmp_path / "s")
    (root / "config").mkdir(exist_ok=True)
    (root / "config" / name).write_text(_deep(100_000))
    for argv in (["info", root], ["check", root]):
        p = rmq(*argv)
        assert p.returncode in (0, 3, 6), p.stderr
        if p.returncode == 6:
            assert f"{root / 'config' / name}" in error_line(p) and "deep" in p.stderr


def test_json_loads_names_the_file_when_too_deep() -> None:
    with pytest.raises(TooDeep, match="x/topics.json: nested too deep") as e:
        json_loads("[" * 100_000 + "]" * 100_000, path="x/topics.json")
    assert e.value.exit_code == 6
    assert json_loads('{"a": [1]}', path="x") == {"a": [1]}


# -------------------------------------------------------------------------------- full disks


@contextlib.contextmanager
def small_disk(where: Path, size: str = "4m") -> Iterator[Path]:
    where.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], capture_output=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {r.stderr.decode().strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def fill(disk: Path, leave: int) -> Path:
    st = os.statvfs(disk)
    f = disk / "fill"
    with open(f, "wb") as fh:
        with contextlib.suppress(OSError):
            fh.write(bytes(max(0, st.f_bavail * st.f_frsize - leave)))
    return f


@pytest.mark.parametrize(
    "argv",
    [["recover", "-q"], ["redispatch", "-q"], ["write", "--topic", "TopicA", "--body", "x"]],
    ids=lambda a: a[0],
)
def test_a_full_disk_is_one_line_and_a_rerun_finishes(tmp_path: Path, argv: list[str]) -> None:
    with small_disk(tmp_path / "disk") as disk:
        root = copy_real_store("crash-midwrite", disk / "c")
        if argv[0] == "write":
            assert rmq("recover", root, "-q", "--quarantine", tmp_path / "q0").returncode == 0
        filler = fill(disk, 40 << 10)
        p = rmq(argv[0], root, *argv[1:], "--quarantine", tmp_path / "q")
        assert p.returncode in (0, 1), p.stderr  # never a SIGBUS
        if p.returncode == 1:
            line = error_line(p)
            assert "no space left on the device" in line and str(disk) in line, line
        filler.unlink()
        again = rmq(argv[0], root, *argv[1:], "--quarantine", tmp_path / "q")
        assert again.returncode in (0, 8), again.stderr  # 8: write refuses the same input twice
        assert_no_errors(root)


def test_a_dry_run_with_a_full_temp_dir_leaves_no_folder(tmp_path: Path) -> None:
    root = copy_real_store("clean-2topics", tmp_path / "s")
    with small_disk(tmp_path / "disk", "1m") as disk:
        fill(disk, 8 << 10)
        p = rmq("redispatch", root, "-q", "--dry-run", env={"TMPDIR": str(disk)})
        assert p.returncode == 1 and "no space left on the device" in error_line(p)
        assert [x.name for x in disk.iterdir()] == ["fill"]


def test_a_full_quarantine_is_one_line_not_a_list(tmp_path: Path) -> None:
    root = copy_real_store("crash-midwrite", tmp_path / "s")
    with small_disk(tmp_path / "disk", "1m") as disk:
        filler = fill(disk, 8 << 10)
        p = rmq("redispatch", root, "-q", "--quarantine", disk / "q")
        assert p.returncode == 1 and "[(" not in p.stderr
        assert "no space left on the device" in error_line(p) and str(disk) in error_line(p)
        filler.unlink()
        assert rmq("redispatch", root, "-q", "--quarantine", disk / "q").returncode == 0
    assert_no_errors(root)


# ------------------------------------------------------------ index rolls and write rollbacks


def _immutable(path: Path) -> Iterator[None]:
    r = subprocess.run(["chattr", "+i", str(path)], capture_output=True)
    if r.returncode != 0:
        pytest.skip(f"chattr +i is not available here: {r.stderr.decode().strip()}")
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=False)


immutable = contextlib.contextmanager(_immutable)


def _keyed_messages(tmp: Path, n: int = 60) -> Path:
    f = tmp / "msgs.ndjson"
    f.write_text("".join(json.dumps({"topic": "TopicA", "body": "x" * 10, "keys": f"k{i}"}) + "\n" for i in range(n)))
    return f


@pytest.mark.parametrize("frozen", ["index", "commitlog"])
def test_a_write_that_fails_midway_is_rolled_back_and_says_so(tmp_path: Path, frozen: str) -> None:
    root = copy_real_store("clean-2topics", tmp_path / "s")
    msgs = _keyed_messages(tmp_path)  # enough keys to roll the last index file
    target = root / "index" if frozen == "index" else last(root / "commitlog")
    before = snapshot(root)
    with immutable(target):
        p = rmq("write", root, "--input", msgs, "--quarantine", tmp_path / "q")
    assert p.returncode == 1 and "the store was rolled back" in error_line(p), p.stderr
    assert snapshot(root) == before
    assert rmq("write", root, "--input", msgs, "--quarantine", tmp_path / "q").returncode == 0
    assert_no_errors(root)


def test_a_failed_rollback_keeps_the_journal_and_a_rerun_finishes(tmp_path: Path, monkeypatch) -> None:
    from rmqstore.ops.write import apply as write_apply
    from rmqstore.ops.write import write_messages
    from rmqstore.ops.write.journal import pending_journal

    root = copy_real_store("clean-2topics", tmp_path / "s")
    before = snapshot(root)
    real_rollback = write_apply._rollback

    def fails(*a: object, **k: object) -> None:
        raise PermissionError(1, "Operation not permitted", str(root / "index"))

    monkeypatch.setattr(write_apply.Dispatcher, "dispatch_columns", fails)
    monkeypatch.setattr(write_apply, "_rollback", fails)
    from rmqstore.ops.write import Message

    with pytest.raises(Exception, match="a re-run of `rmqstore write`") as e:
        write_messages(root, [Message(topic="TopicA", queue_id=0, body=b"x")])
    assert "so did its rollback" in str(e.value)
    assert pending_journal(root) is not None
    monkeypatch.setattr(write_apply, "_rollback", real_rollback)
    monkeypatch.undo()
    p = rmq("write", root, "--topic", "TopicA", "--body", "x", "--quarantine", tmp_path / "q")
    assert p.returncode == 0, p.stderr
    assert_no_errors(root)
    assert snapshot(root) != before


def test_an_index_roll_interrupted_leaves_the_old_file_and_no_new_one(tmp_path: Path, monkeypatch) -> None:
    from rmqstore.dispatch import dispatcher
    from rmqstore.ops.write import Message, write_messages
    from rmqstore.ops.write.journal import pending_journal

    root = copy_real_store("clean-2topics", tmp_path / "s")
    before = snapshot(root)

    def interrupted(path: object, size: int) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(dispatcher, "create_sized", interrupted)
    msgs = [Message(topic="TopicA", queue_id=0, body=b"x", keys=f"k{i}") for i in range(60)]
    with pytest.raises(KeyboardInterrupt):
        write_messages(root, msgs)
    assert snapshot(root) == before and pending_journal(root) is None


# ----------------------------------------------------------------------------- stale temp files


def test_temp_files_of_killed_runs_are_removed_under_the_lock(tmp_path: Path) -> None:
    root = copy_real_store("crash-midwrite", tmp_path / "s")
    (root / ".rmqstore" / "tmp").mkdir(parents=True)
    (root / "config").mkdir(exist_ok=True)
    stale = [root / ".rmqstore" / ".write.last.json.4242.tmp", root / ".rmqstore" / "tmp" / ".checkpoint.77.tmp",
             root / "config" / ".topics.json.31337.tmp", root / ".checkpoint.5.tmp"]  # fmt: skip
    kept = [root / ".rmqstore" / "notes.tmp", root / "config" / "topics.json.tmp"]  # not names rmqstore gives
    for f in stale + kept:
        f.write_bytes(b"partial")
    assert rmq("info", root).returncode in (0, 3)
    assert all(f.exists() for f in stale)  # a read-only run holds no lock: it removes nothing
    assert rmq("recover", root, "-q", "--quarantine", tmp_path / "q").returncode == 0
    assert not any(f.exists() for f in stale)
    assert all(f.exists() for f in kept)


def test_the_bak_copy_is_mentioned_only_when_there_was_a_previous_file(tmp_path: Path) -> None:
    root = copy_real_store("clean-2topics", tmp_path / "s")
    assert not (root / "config" / "consumerOffset.json").exists()
    argv = ["offsets", "set", root, "--group", "G", "--topic", "TopicA", "--queue", "0", "--offset"]
    first, second = rmq(*argv, "0"), rmq(*argv, "1")
    assert first.returncode == 0 and ".bak" not in first.stderr, first.stderr
    assert second.returncode == 0 and "previous file is kept as its .bak" in second.stderr, second.stderr
    assert (root / "config" / "consumerOffset.json.bak").exists()
