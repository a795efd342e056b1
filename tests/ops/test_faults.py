"""Fault injection: hostile and broken stores built from copies of the real stores (and stores
``rmqstore write`` makes), run through every command.

Every run must: create nothing outside the store and its quarantine (the temp tree is walked before
and after), never end in "internal error", exit with a code from the README's table, and, for a
modifying command, either refuse with every data file byte-identical or succeed with every removed
or rewritten byte accounted for in the quarantine (sha256 accounting through its manifest).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from conftest import REPO, copy_real_store, hold_lock, load_truth
from typer.testing import CliRunner

from rmqstore.cli import app
from rmqstore.errors import EXIT_CODES

runner = CliRunner()
CL_SIZE = 32768  # mapedFileSizeCommitLog of the real stores


# ------------------------------------------------------------------------------------ helpers


def tree(top: Path) -> set[Path]:
    out = set()
    for dirpath, dirnames, filenames in os.walk(top):
        out |= {Path(dirpath, n) for n in dirnames + filenames}
    return out


def data_bytes(root: Path) -> dict[Path, bytes]:
    """Every file a broker reads (rmqstore's scratch directory and the lock left out)."""
    out = {}
    for p in tree(root):
        rel = p.relative_to(root)
        if rel.parts[0] in (".rmqstore", "lock") or p.is_symlink() or not p.is_file():
            continue
        out[p] = p.read_bytes()
    return out


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def saved_copies(qbase: Path) -> tuple[dict[Path, list[bytes]], dict[Path, list[tuple[int, bytes]]]]:
    """Whole files and byte ranges every manifest under ``qbase`` says it keeps, by original path."""
    files: dict[Path, list[bytes]] = {}
    ranges: dict[Path, list[tuple[int, bytes]]] = {}
    for m in qbase.rglob("manifest.json") if qbase.is_dir() else ():
        doc = json.loads(m.read_text())
        assert doc["schema"] == "rmqstore-quarantine/1"
        for item in doc["items"]:
            saved, orig = Path(item.get("saved", "")), Path(item["path"])
            assert orig.is_absolute() and (not item.get("saved") or saved.is_absolute()), item
            if item["kind"] == "range":
                data = saved.read_bytes()
                assert sha(data) == item["sha256"]
                ranges.setdefault(orig, []).append((item["from"], data))
            elif item["kind"] == "file" and saved.is_file():
                files.setdefault(orig, []).append(saved.read_bytes())
            elif item["kind"] == "directory" and saved.is_dir():
                for p in saved.rglob("*"):
                    if p.is_file():
                        files.setdefault(orig / p.relative_to(saved), []).append(p.read_bytes())
    return files, ranges


def broker_append_update(root: Path, path: Path, new: bytes | None) -> bool:
    """What appending a message changes in place, as the broker does on every put: an index file's
    header and hash slots, the checkpoint, config/topics.json. Not data removed, so not quarantined."""
    rel = path.relative_to(root).parts
    if new is None:
        return False
    return rel[0] in ("checkpoint", "config") or (rel[0] == "index" and len(new) == len(path.read_bytes()))


def assert_accounted(before: dict[Path, bytes], root: Path, qbase: Path, *, appends: bool = False) -> None:
    """Every byte removed or rewritten is in the quarantine: a changed file is kept whole, or the
    saved ranges written back over it give the old bytes wherever the old bytes were not zero."""
    files, ranges = saved_copies(qbase)
    for path, old in before.items():
        new = path.read_bytes() if path.is_file() else None
        if new == old:
            continue
        if appends and broker_append_update(root, path, new):
            if path.parent.name == "index":  # only the header and the hash slots change in place
                entries_from = 40 + 4 * 128  # maxHashSlotNum=128 in the real stores' broker.conf
                n = min(len(old), len(new))
                changed = np.flatnonzero(np.frombuffer(old[:n], np.uint8) != np.frombuffer(new[:n], np.uint8))
                assert not len(changed) or changed[0] >= 0 and all(c < entries_from or old[c] == 0 for c in changed), (
                    f"{path}: index entries rewritten"
                )
            continue
        if any(sha(c) == sha(old) for c in files.get(path.resolve(), []) + files.get(path, [])):
            continue
        assert new is not None, f"{path} was removed and is not in the quarantine"
        buf = bytearray(new.ljust(len(old), b"\0"))
        for start, data in ranges.get(path.resolve(), []) + ranges.get(path, []):
            buf[start : start + len(data)] = data
        a = np.frombuffer(old, np.uint8)
        b = np.frombuffer(bytes(buf[: len(old)]), np.uint8)
        lost = np.flatnonzero((a != b) & (a != 0))
        assert not len(lost), f"{path}: {len(lost)} non-zero bytes rewritten and not kept, the first at {lost[0]}"


def run(
    tmp: Path,
    root: Path,
    args: list[str],
    *,
    codes: set[int],
    modifying: bool,
    qbase: Path | None = None,
    appends: bool = False,
):
    """Run one command line on a fault and check what every run must satisfy."""
    before_tree, before = tree(tmp), data_bytes(root)
    r = runner.invoke(app, args)
    out = r.stdout + r.stderr
    assert r.exit_code in codes, (args, r.exit_code, out)
    assert r.exit_code in EXIT_CODES
    assert "internal error" not in out and "Traceback" not in out, out
    if r.exit_code not in (0, 3, 9):
        errors = [ln for ln in r.stderr.splitlines() if ln.startswith("error: ")]
        assert len(errors) == 1, r.stderr  # one line saying what is wrong (a plan may come before it)
    allowed = [root] + ([qbase] if qbase is not None else [])
    for p in tree(tmp) - before_tree:
        assert any(p == a or a in p.parents for a in allowed), f"created outside the store: {p}"
    assert not any(Path(tempfile.gettempdir()).iterdir())  # a dry run's temporary build is gone
    if modifying:
        if r.exit_code in (0, 9) and "--dry-run" not in args:
            assert qbase is not None
            assert_accounted(before, root, qbase, appends=appends or args[0] == "write")
        else:
            assert data_bytes(root) == before, "a refused (or dry) run changed data files"
    return r


@pytest.fixture(autouse=True)
def private_tempdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The system temp folder of these runs is the test's own: a leftover is seen, another's is not."""
    d = tmp_path / "systmp"
    d.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(d))


def messages(case: str) -> Iterator[dict]:
    for q in load_truth(case)["queues"]:
        yield from q["messages"]


def patch(path: Path, pos: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(pos)
        f.write(data)


def record_file(root: Path, phy: int) -> tuple[Path, int]:
    return root / "commitlog" / f"{phy - phy % CL_SIZE:020d}", phy % CL_SIZE


def patch_topics(root: Path, case: str, new: bytes) -> int:
    """Give every TopicA record of the copy the topic bytes ``new`` (same length: the record stays whole)."""
    n = 0
    for m in messages(case):
        f, pos = record_file(root, m["commitLogOffset"])
        if m["topic"] != "TopicA" or not f.exists():
            continue
        at = pos + 89 + m["bodyLength"]  # V1 record: the topic follows the body and its 1-byte length
        assert f.read_bytes()[at : at + 6] == b"TopicA"
        patch(f, at, new)
        n += 1
    return n


# --------------------------------------------------------------- 1. topics that escape the store

HOSTILE_TOPICS = [b"../esc", b"/tmp/x", b"..\x00abc", b"Top\ncA", b"......"]
TOPIC_COMMANDS = {
    "redispatch": ("clean-2topics", ["redispatch", "{root}", "-q", "--quarantine", "{q}"]),
    "recover": ("crash-midwrite", ["recover", "{root}", "-q", "--quarantine", "{q}"]),
    "recover-dry-run": ("crash-midwrite", ["recover", "{root}", "-q", "--dry-run"]),
    "recover-rebuild-dry-run": ("clean-2topics", ["recover", "{root}", "-q", "--rebuild-consumequeue", "--dry-run"]),
    "recover-rebuild": ("clean-2topics", ["recover", "{root}", "-q", "--rebuild-consumequeue", "--quarantine", "{q}"]),
    "write-catch-up": (
        "crash-midwrite",
        ["write", "{root}", "--topic", "TopicB", "--body", "x", "--quarantine", "{q}"],
    ),
    "redispatch-dry-run": ("clean-2topics", ["redispatch", "{root}", "-q", "--dry-run"]),
}


@pytest.mark.parametrize("topic", HOSTILE_TOPICS, ids=lambda t: t.decode("ascii", "backslashreplace"))
@pytest.mark.parametrize("command", list(TOPIC_COMMANDS))
def test_record_topic_never_becomes_a_path(tmp_path: Path, command: str, topic: bytes) -> None:
    case, argv = TOPIC_COMMANDS[command]
    root = copy_real_store(case, tmp_path / "s")
    q = tmp_path / "q"
    assert patch_topics(root, case, topic) > 0
    args = [a.format(root=root, q=q) for a in argv]
    absolute_before = os.path.lexists("/tmp/x")  # where the absolute topic would lead
    r = run(tmp_path, root, args, codes={6}, modifying=True, qbase=q)
    assert os.path.lexists("/tmp/x") == absolute_before
    line = r.stderr.splitlines()[0]
    shown = topic.decode().encode("unicode_escape").decode()
    assert f"record topic '{shown}'" in line and "is not a topic name the broker accepts" in line, line
    assert f"{root}/commitlog/" in line and "phy offset" in line, line
    assert not (tmp_path / "esc").exists()


def test_queue_paths_stay_inside_the_store(tmp_path: Path) -> None:
    from rmqstore.errors import CorruptData
    from rmqstore.store.layout import queue_dir

    base = tmp_path / "store"
    assert queue_dir(base, "%RETRY%group_1", 3) == base / "consumequeue" / "%RETRY%group_1" / "3"
    for bad in ("..", "../x", "/abs", "a/b", "a\x00", "a\n", "", ".", "x" * 256):
        with pytest.raises(CorruptData):
            queue_dir(base, bad, 0)


# ------------------------------------------------------- 2. an unreadable commit log wipes nothing


def _runs(prefix: list[str]) -> str | None:
    p = subprocess.run([*prefix, sys.executable, "-c", "import numpy, typer"], capture_output=True, text=True)
    return None if p.returncode == 0 else p.stderr.strip()[:120]


def unprivileged() -> tuple[list[str], bool] | str:
    """A command prefix that runs rmqstore where file permissions apply, and whether the files must be
    handed to that user; or why there is none. The user nobody first; where it cannot run this
    interpreter (a Python under /root), root without the capabilities that bypass file permissions."""
    if os.geteuid() != 0:
        return "needs root to switch to an unprivileged user"
    tried = []
    if shutil.which("runuser"):
        why = _runs(nobody := ["runuser", "-u", "nobody", "--"])
        if why is None:
            return nobody, True
        tried.append(f"the user nobody cannot run {sys.executable}: {why}")
    if shutil.which("setpriv"):
        why = _runs(nocaps := ["setpriv", "--inh-caps=-all", "--ambient-caps=-all", "--bounding-set=-all", "--"])
        if why is None:
            return nocaps, False
        tried.append(f"setpriv cannot drop capabilities: {why}")
    return "; ".join(tried) or "neither runuser nor setpriv is installed"


@pytest.mark.parametrize("command", ["redispatch", "recover"])
def test_unreadable_commitlog_unprivileged(tmp_path: Path, command: str) -> None:
    how = unprivileged()
    if isinstance(how, str):
        pytest.skip(how)
    prefix, hand_over = how
    top = Path(tempfile.mkdtemp(prefix="rmqstore-perm-", dir="/tmp"))
    try:
        top.chmod(0o755)
        root = copy_real_store("clean-2topics", top)
        if hand_over:
            subprocess.run(["chown", "-R", "nobody", str(top)], check=True)
        (root / "commitlog").chmod(0)
        before = {p: p.stat().st_size for p in root.rglob("*") if p.is_file() and "commitlog" not in p.parts}
        code = "import sys; from rmqstore.cli import main; sys.argv[0] = 'rmqstore'; main()"
        p = subprocess.run([*prefix, sys.executable, "-c", code, command, str(root), "-q"],
                           cwd=REPO, capture_output=True, text=True)  # fmt: skip
        assert p.returncode == 1 and f"{root}/commitlog: permission denied" in p.stderr, p.stderr
        assert {p: p.stat().st_size for p in root.rglob("*") if p.is_file() and "commitlog" not in p.parts} == before
    finally:
        subprocess.run(["chmod", "-R", "u+rwx", str(top)])
        shutil.rmtree(top, ignore_errors=True)


def test_empty_commitlog_rebuild_is_refused_without_force(tmp_path: Path) -> None:
    root = copy_real_store("clean-2topics", tmp_path / "s")
    q = tmp_path / "q"
    shutil.rmtree(root / "commitlog")
    (root / "commitlog").mkdir()
    r = run(tmp_path, root, ["redispatch", str(root), "-q", "--quarantine", str(q)], codes={8}, modifying=True)
    assert "consume queue entries where the store has" in r.stderr and "--force" in r.stderr
    run(tmp_path, root, ["redispatch", str(root), "-q", "--quarantine", str(q), "--force"], codes={0},
        modifying=True, qbase=q)  # fmt: skip
    assert not any(p.is_file() for p in (root / "consumequeue").rglob("*"))


def test_commitlog_that_is_a_file(tmp_path: Path) -> None:
    root = copy_real_store("clean-2topics", tmp_path / "s")
    shutil.rmtree(root / "commitlog")
    (root / "commitlog").write_bytes(b"not a directory")
    for args in (["redispatch", str(root), "-q"], ["recover", str(root), "-q"], ["write", str(root), "--topic", "T"]):
        r = run(tmp_path, root, args, codes={6}, modifying=True)
        assert r.stderr.startswith(f"error: {root}/commitlog: is not a directory"), r.stderr


# ------------------------------------------------------- 3. a reused --quarantine gets a new folder


def test_reused_quarantine_gets_a_fresh_folder_each_run(tmp_path: Path) -> None:
    root = copy_real_store("clean-2topics", tmp_path / "s")
    ref = copy_real_store("clean-2topics", tmp_path / "ref")
    q = tmp_path / "q"
    for n in (1, 2):
        victim = sorted((root / "consumequeue" / "TopicA" / "0").iterdir())[0]
        victim.unlink()
        run(tmp_path, root, ["redispatch", str(root), "-q", "--quarantine", str(q)], codes={0}, modifying=True, qbase=q)
        assert victim.read_bytes() == (ref / victim.relative_to(root)).read_bytes()  # rebuilt both times
        runs = sorted(q.iterdir())
        assert len(runs) == n and all((d / "manifest.json").is_file() for d in runs)


# ------------------------------------------------------ 4. write refuses to append after damage


def test_write_refuses_after_a_flipped_bit_in_the_last_file(tmp_path: Path) -> None:
    root = copy_real_store("clean-2topics", tmp_path / "s")
    last = max(m["commitLogOffset"] for m in messages("clean-2topics"))
    victim = max(
        (m for m in messages("clean-2topics") if m["commitLogOffset"] // CL_SIZE == last // CL_SIZE),
        key=lambda m: -m["commitLogOffset"],
    )  # the first record of the last file
    f, pos = record_file(root, victim["commitLogOffset"])
    body_at = pos + 88
    patch(f, body_at, bytes([f.read_bytes()[body_at] ^ 0x01]))
    r = run(tmp_path, root, ["write", str(root), "--topic", "TopicA", "--body", "x"], codes={6}, modifying=True)
    assert "run `rmqstore recover" in r.stderr and f"phy offset {victim['commitLogOffset']}" in r.stderr, r.stderr
    run(tmp_path, root, ["write", str(root), "--topic", "TopicA", "--body", "x", "--dry-run"], codes={6},
        modifying=True)  # fmt: skip


# ------------------------------------------------------ 5. the same input is not written twice


def test_same_input_again_is_refused_unless_asked(tmp_path: Path) -> None:
    root = copy_real_store("clean-2topics", tmp_path / "s")
    args = ["write", str(root), "--topic", "TopicA", "--body", "once", "--now", "1795400000000"]
    run(tmp_path, root, args, codes={0}, modifying=True, qbase=tmp_path / "q")
    r = run(tmp_path, root, args, codes={8}, modifying=True)
    assert "already written by the last write" in r.stderr and "--again" in r.stderr
    run(tmp_path, root, [*args, "--again"], codes={0}, modifying=True, qbase=tmp_path / "q")


# -------------------------------------------- 6. a failed recover can be finished, check shows it


def test_recover_with_abort_a_directory_leaves_a_journal_to_finish(tmp_path: Path) -> None:
    root = copy_real_store("crash-midwrite", tmp_path / "s")
    q = tmp_path / "q"
    (root / "abort").unlink()
    (root / "abort").mkdir()
    before = data_bytes(root)
    r = runner.invoke(app, ["recover", str(root), "-q", "--quarantine", str(q)])
    assert r.exit_code == 6 and "internal error" not in r.output, r.output
    assert f"{root}/abort: is a directory" in r.stderr and "run `rmqstore recover" in r.stderr
    assert_accounted(before, root, q)
    c = runner.invoke(app, ["check", str(root), "--quick"])
    assert c.exit_code == 3 and "interrupted `rmqstore recover` is pending" in c.output and "abort" in c.output
    i = runner.invoke(app, ["info", str(root), "-f", "json"])
    pending = json.loads(i.stdout)["pendingOperations"]
    assert [p["operation"] for p in pending] == ["recover"] and "is a directory" in pending[0]["blockedBy"]
    w = run(tmp_path, root, ["write", str(root), "--topic", "TopicA", "--body", "x"], codes={8}, modifying=True)
    assert "interrupted `rmqstore recover`" in w.stderr
    (root / "abort").rmdir()  # the obstacle goes
    run(tmp_path, root, ["recover", str(root), "-q", "--quarantine", str(q)], codes={0}, modifying=True, qbase=q)
    assert not (root / ".rmqstore").exists() and not (root / "abort").exists()
    assert runner.invoke(app, ["check", str(root), "--quick"]).exit_code == 0


def test_recover_refuses_bad_data_at_plan_time(tmp_path: Path) -> None:
    root = copy_real_store("crash-midwrite", tmp_path / "s")
    patch_topics(root, "crash-midwrite", b"../esc")
    q = tmp_path / "q"
    r = run(tmp_path, root, ["recover", str(root), "-q", "--quarantine", str(q)], codes={6}, modifying=True, qbase=q)
    assert "is not a topic name the broker accepts" in r.stderr and "rolled back" not in r.stderr
    assert not (root / ".rmqstore").exists()


def test_recover_rolls_back_on_bad_data_mid_apply(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Data that turns bad between the plan and the run (here: the plan's check left out) is rolled back."""
    from rmqstore.ops import recover

    monkeypatch.setattr(recover, "_refuse_bad_topics", lambda *_a: None)
    root = copy_real_store("crash-midwrite", tmp_path / "s")
    patch_topics(root, "crash-midwrite", b"../esc")
    q = tmp_path / "q"
    r = run(tmp_path, root, ["recover", str(root), "-q", "--quarantine", str(q)], codes={6}, modifying=True, qbase=q)
    assert "rolled back every change" in r.stderr
    assert not (root / ".rmqstore").exists()


# ------------------------------------------------- 7. OS errors: one line, a documented exit code


def make_index_a_file(root: Path) -> None:
    shutil.rmtree(root / "index")
    (root / "index").write_bytes(b"x")


def make_cq_file_a_directory(root: Path) -> None:
    f = sorted((root / "consumequeue" / "TopicA" / "0").iterdir())[-1]
    f.unlink()
    f.mkdir()


def make_index_file_a_directory(root: Path) -> None:
    f = sorted((root / "index").iterdir())[-1]
    f.unlink()
    f.mkdir()


def make_symlink_loop(root: Path) -> None:
    f = sorted((root / "commitlog").iterdir())[-1]
    f.unlink()
    f.symlink_to(f.name)


OS_FAULTS = [make_index_a_file, make_cq_file_a_directory, make_index_file_a_directory, make_symlink_loop]
OS_COMMANDS = [
    (["info", "{root}"], False),
    (["check", "{root}"], False),
    (["dump", "commitlog", "{root}", "--count"], False),
    (["query", "key", "{root}", "TopicA", "order-1"], False),
    (["offsets", "show", "{root}"], False),
    (["recover", "{root}", "-q", "--quarantine", "{q}"], True),
    (["redispatch", "{root}", "-q", "--quarantine", "{q}"], True),
    (["write", "{root}", "--topic", "TopicA", "--body", "x", "--quarantine", "{q}"], True),
    (["expire", "{root}", "--force", "--quarantine", "{q}"], True),
]


@pytest.mark.parametrize("fault", OS_FAULTS, ids=lambda f: f.__name__)
def test_os_errors_are_one_clear_line(tmp_path: Path, fault) -> None:
    for n, (argv, modifying) in enumerate(OS_COMMANDS):
        root = copy_real_store("clean-2topics", tmp_path / f"s{n}")
        fault(root)
        q = tmp_path / f"q{n}"
        args = [a.format(root=root, q=q) for a in argv]
        run(tmp_path, root, args, codes=set(EXIT_CODES) - {2}, modifying=modifying, qbase=q)


# ------------------------------------------------------------ 8. a damaged index file is not appended


def test_write_refuses_a_damaged_last_index_file(tmp_path: Path) -> None:
    root = copy_real_store("clean-2topics", tmp_path / "s")
    last = sorted((root / "index").iterdir())[-1]
    patch(last, 0, b"\xff" * 40)
    for extra in ([], ["--dry-run"]):
        r = run(tmp_path, root, ["write", str(root), "--topic", "TopicA", "--body", "x", *extra], codes={6},
                modifying=True)  # fmt: skip
        assert r.stderr.startswith(f"error: {last}: damaged index file") and "redispatch --only index" in r.stderr


# ------------------------------------------------------ 9. a locked store: nothing written inside


LOCKED_COMMANDS = [
    ["expire", "{root}", "--force"],
    ["expire", "{root}", "--force", "--dry-run"],
    ["redispatch", "{root}", "-q"],
    ["redispatch", "{root}", "-q", "--dry-run"],
    ["recover", "{root}", "-q"],
    ["recover", "{root}", "-q", "--dry-run"],
    ["write", "{root}", "--topic", "TopicA", "--body", "x"],
    ["write", "{root}", "--topic", "TopicA", "--body", "x", "--dry-run"],
    ["offsets", "set", "{root}", "--group", "G", "--topic", "TopicA", "--queue", "0", "--offset", "0"],
    ["offsets", "set", "{root}", "--group", "G", "--topic", "TopicA", "--queue", "0", "--offset", "0", "--dry-run"],
]


@pytest.mark.parametrize("holder", ["broker", "rmqstore"])
def test_locked_store_gets_nothing_written_inside(tmp_path: Path, holder: str) -> None:
    root = copy_real_store("crash-midwrite", tmp_path / "s")
    # the holder's command line names it: a broker's java, or another rmqstore run
    proc = hold_lock(root, *(["rmqstore", "recover"] if holder == "rmqstore" else ["BrokerStartup"]))
    try:
        for argv in LOCKED_COMMANDS:
            before = {p: (p.stat().st_mtime_ns, p.stat().st_size) for p in tree(root)}
            r = run(tmp_path, root, [a.format(root=root) for a in argv], codes={4}, modifying=True)
            assert {p: (p.stat().st_mtime_ns, p.stat().st_size) for p in tree(root)} == before, argv
            who = (
                f"another rmqstore run (pid {proc.pid}: rmqstore recover)"
                if holder == "rmqstore"
                else "a running broker"
            )
            assert who in r.stderr, (argv, r.stderr)
    finally:
        proc.kill()
        proc.wait()


# ------------------------------------------ 10. restore commands work from any directory


def test_manifest_restore_commands_work_from_anywhere(tmp_path: Path) -> None:
    work = tmp_path / "it's a work dir"  # a space and a quote: the restore commands quote their paths
    root = copy_real_store("crash-midwrite", work)
    original = {p.relative_to(root): p.read_bytes() for p in (root / "commitlog").iterdir()}
    cp = (root / "checkpoint").read_bytes()
    cwd = os.getcwd()
    os.chdir(work)
    try:  # relative paths on the command line
        r = runner.invoke(app, ["recover", "store", "-q", "--quarantine", "q"])
    finally:
        os.chdir(cwd)
    assert r.exit_code == 0, r.output
    (manifest,) = (work / "q").rglob("manifest.json")
    doc = json.loads(manifest.read_text())
    for item in reversed(doc["items"]):
        if item["kind"] in ("range", "file", "marker"):
            subprocess.run(["sh", "-c", item["restore"]], cwd="/", check=True)
    assert {p.relative_to(root): p.read_bytes() for p in (root / "commitlog").iterdir()} == original
    assert (root / "checkpoint").read_bytes() == cp and (root / "abort").exists()


# ------------------------------------- stores rmqstore write makes, damaged the same ways


V44 = ("--broker-version", "4.4.0")


def written_store(tmp: Path) -> Path:
    """A store `rmqstore write` made, with small files (the fault runs keep every file's bytes twice)."""
    root = tmp / "made"
    root.mkdir()
    (root / "broker.conf").write_text(
        f"storePathRootDir={root}\nmapedFileSizeCommitLog=65536\nmapedFileSizeConsumeQueue=6000\n"
        "maxHashSlotNum=64\nmaxIndexNum=256\n"
    )
    lines = "".join(json.dumps({"topic": f"T{i % 3}", "keys": f"k{i}", "body": "b" * 50}) + "\n" for i in range(300))
    r = runner.invoke(app, ["write", str(root), "-", "--create", "--now", "1795400000000"], input=lines)
    assert r.exit_code == 0, r.output
    shutil.rmtree(root / ".rmqstore")
    return root


def test_made_store_with_an_escaping_topic_and_a_damaged_index(tmp_path: Path) -> None:
    root = written_store(tmp_path)
    # a store written without broker.conf and not yet filling a file: 4.4 or 5.x by its contents alone
    f = sorted((root / "commitlog").iterdir())[0]
    data = f.read_bytes()
    at = data.index(b"T1")  # the topic of the second record
    patch(f, at, b"..")
    q = tmp_path / "q"
    r = run(tmp_path, root, ["redispatch", str(root), "-q", "--quarantine", str(q), *V44], codes={6}, modifying=True)
    assert "record topic '..'" in r.stderr
    patch(f, at, b"T1")
    patch(sorted((root / "index").iterdir())[-1], 0, b"\xff" * 40)
    run(tmp_path, root, ["write", str(root), "--topic", "T1", "--body", "x", *V44], codes={6}, modifying=True)
    run(
        tmp_path,
        root,
        ["redispatch", str(root), "-q", "--quarantine", str(q), *V44],
        codes={0},
        modifying=True,
        qbase=q,
    )
    run(tmp_path, root, ["write", str(root), "--topic", "T1", "--body", "x", *V44], codes={0}, modifying=True, qbase=q)


def test_fcntl_lock_probe_is_what_brokers_take() -> None:
    assert fcntl.LOCK_EX and hasattr(fcntl, "lockf")  # the broker's FileChannel.tryLock is a POSIX record lock


# ----------------------------------- the same OS errors, injected where root cannot provoke them


@pytest.mark.parametrize("command", ["redispatch", "recover", "write"])
def test_permission_denied_on_the_commit_log_is_named(tmp_path: Path, monkeypatch, command: str) -> None:
    root = copy_real_store("clean-2topics", tmp_path / "s")
    real = os.listdir

    def listdir(path="."):
        if Path(path) == root / "commitlog":
            raise PermissionError(13, "Permission denied", str(path))
        return real(path)

    monkeypatch.setattr(os, "listdir", listdir)
    args = [command, str(root)] + (["--topic", "TopicA", "--body", "x"] if command == "write" else ["-q"])
    r = run(tmp_path, root, args, codes={1}, modifying=True)
    assert f"error: {root}/commitlog: permission denied" in r.stderr, r.stderr


def test_enodev_from_mmap_is_one_line(tmp_path: Path, monkeypatch) -> None:
    import errno
    import mmap

    root = copy_real_store("clean-2topics", tmp_path / "s")

    def no_map(*a, **k):
        raise OSError(errno.ENODEV, "No such device")

    monkeypatch.setattr(mmap, "mmap", no_map)
    for args in (["dump", "commitlog", str(root), "--count"], ["check", str(root)], ["info", str(root)]):
        r = run(tmp_path, root, args, codes={6, 3}, modifying=False)
        assert "cannot be memory-mapped" in r.stdout + r.stderr, (args, r.output)


def test_unreadable_commitlog_file_is_named(tmp_path: Path, monkeypatch) -> None:
    root = copy_real_store("clean-2topics", tmp_path / "s")
    victim = sorted((root / "commitlog").iterdir())[0]
    real = os.open

    def deny(path, flags, *a, **k):
        if Path(path) == victim:
            raise PermissionError(13, "Permission denied", str(path))
        return real(path, flags, *a, **k)

    monkeypatch.setattr(os, "open", deny)
    for args in (["redispatch", str(root), "-q"], ["dump", "commitlog", str(root), "--count"]):
        r = run(tmp_path, root, args, codes={1}, modifying=args[0] == "redispatch")
        assert f"error: {victim}: permission denied" in r.stderr, r.stderr


DRY_RUNS = [
    ("crash-midwrite", ["recover", "{root}", "-q", "--dry-run"]),
    ("clean-2topics", ["redispatch", "{root}", "-q", "--dry-run"]),
    ("clean-2topics", ["write", "{root}", "--topic", "TopicA", "--body", "x", "--dry-run"]),
    ("clean-2topics", ["expire", "{root}", "--force", "--dry-run"]),
    ("clean-2topics", ["offsets", "set", "{root}", "--group", "G", "--topic", "TopicA", "--queue", "0",
                       "--offset", "0", "--dry-run"]),
]  # fmt: skip


@pytest.mark.parametrize(("case", "argv"), DRY_RUNS, ids=[a[0] for _, a in DRY_RUNS])
def test_dry_run_writes_nothing_in_the_store(tmp_path: Path, case: str, argv: list[str]) -> None:
    root = copy_real_store(case, tmp_path / "s")
    before = {p: (p.stat().st_mtime_ns, p.stat().st_size) for p in tree(root)}
    run(tmp_path, root, [a.format(root=root) for a in argv], codes={0, 9}, modifying=True)
    assert {p: (p.stat().st_mtime_ns, p.stat().st_size) for p in tree(root)} == before


def test_write_checks_again_when_the_files_changed_since_the_last_write(tmp_path: Path) -> None:
    root = copy_real_store("clean-2topics", tmp_path / "s")
    q = tmp_path / "q"
    run(tmp_path, root, ["write", str(root), "--topic", "TopicA", "--body", "one"], codes={0}, modifying=True, qbase=q)
    last = max(m["commitLogOffset"] for m in messages("clean-2topics"))
    f, pos = record_file(root, last)
    patch(f, pos + 88, bytes([f.read_bytes()[pos + 88] ^ 0x10]))  # a bit of the last message's body
    r = run(tmp_path, root, ["write", str(root), "--topic", "TopicA", "--body", "two"], codes={6}, modifying=True)
    assert f"phy offset {last}" in r.stderr and "run `rmqstore recover" in r.stderr


def test_fresh_quarantine_folders_never_collide(tmp_path: Path) -> None:
    from rmqstore.safety.quarantine import Quarantine

    folders = {Quarantine.fresh(tmp_path / "q", "recover", tmp_path, 1_795_400_000_000).folder for _ in range(3)}
    assert len(folders) == 3 and all(f.parent == tmp_path / "q" and f.is_dir() for f in folders)
