"""Bad input gives one clear line on stderr and the documented exit code, never a traceback."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import FIXTURES, copy_real_store
from typer.testing import CliRunner

import rmqstore.cli.info
from rmqstore.cli import app
from rmqstore.errors import EXIT_CODES

runner = CliRunner()


def run_info(*args: str):
    result = runner.invoke(app, ["info", *args])
    assert "Traceback" not in result.output
    assert result.exit_code in EXIT_CODES
    return result


def first_err(result) -> str:
    lines = result.stderr.splitlines()
    assert lines, f"nothing on stderr (exit {result.exit_code}): {result.stdout}"
    return lines[0]


def test_missing_directory(tmp_path):
    r = run_info(str(tmp_path / "nope"))
    assert r.exit_code == 5
    assert first_err(r) == f"error: {tmp_path / 'nope'}: no such directory"


def test_a_file_is_not_a_store(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    r = run_info(str(f))
    assert r.exit_code == 5
    assert first_err(r) == f"error: {f}: not a directory"


def test_an_empty_directory_is_not_a_store(tmp_path):
    r = run_info(str(tmp_path))
    assert r.exit_code == 5
    assert first_err(r).startswith(f"error: {tmp_path}: not a RocketMQ store")


def test_missing_argument_is_a_usage_error():
    r = runner.invoke(app, ["info"])
    assert r.exit_code == 2
    assert "Traceback" not in r.output


def test_unknown_option_is_a_usage_error(tmp_path):
    r = runner.invoke(app, ["info", str(tmp_path), "--no-such-option"])
    assert r.exit_code == 2


@pytest.mark.parametrize(
    ("rel", "size", "what"),
    [
        ("consumequeue/TopicA/0/00000000000000000400", 37, "file is 37 bytes, configured size is 400"),
        ("index/20261122025341378", 10, "file is 10 bytes"),
        ("commitlog/00000000000000065536", 5, "file is 5 bytes, configured size is 32768"),
    ],
)
def test_truncated_files(tmp_path, rel, size, what):
    root = copy_real_store("clean-2topics", tmp_path)
    os.truncate(root / rel, size)
    r = run_info(str(root), "-f", "plain")
    assert r.exit_code == 3
    line = first_err(r)
    assert line.startswith("error: 1 error(s) found; the first: ") and str(root / rel) in line and what in line
    assert len(r.stderr.splitlines()) == 1


def test_garbage_file_in_a_segment_directory(tmp_path):
    root = copy_real_store("clean-2topics", tmp_path)
    (root / "commitlog" / "notes.txt").write_text("hello")
    r = run_info(str(root), "-f", "plain")
    assert r.exit_code == 3
    assert "notes.txt: file name is not a 20-digit offset" in first_err(r)


def test_garbage_commitlog_content(tmp_path):
    root = copy_real_store("delay-tx-retry", tmp_path)
    path = root / "commitlog" / "00000000000000000000"
    path.write_bytes(os.urandom(64) + path.read_bytes()[64:])
    r = run_info(str(root), "-f", "plain")
    # the queues point at messages the commit log no longer yields
    assert r.exit_code == 3
    assert "past the commit log end" in first_err(r)
    assert "ends at an invalid record" in r.stdout


def test_wrong_consume_queue_file_size(tmp_path):
    root = copy_real_store("delay-tx-retry", tmp_path)
    q = root / "consumequeue" / "TopicTx" / "0" / "00000000000000000000"
    q.write_bytes(q.read_bytes() + b"\0")
    r = run_info(str(root), "-f", "plain")
    assert r.exit_code == 3
    assert "file is 401 bytes, configured size is 400" in first_err(r)


def test_broker_conf_typo(tmp_path):
    root = copy_real_store("clean-2topics", tmp_path)
    conf = tmp_path / "broker.conf"
    conf.write_text(conf.read_text().replace("mapedFileSizeCommitLog", "mapedFileSizeCommitlog"))
    line_no = next(
        i for i, ln in enumerate(conf.read_text().splitlines(), 1) if ln.startswith("mapedFileSizeCommitlog")
    )
    r = run_info(str(root))
    assert r.exit_code == 1
    assert first_err(r) == (
        f"error: {conf}:{line_no}: unknown key 'mapedFileSizeCommitlog' (did you mean 'mapedFileSizeCommitLog'?)"
    )


def test_broker_conf_bad_value(tmp_path):
    root = copy_real_store("clean-2topics", tmp_path)
    conf = tmp_path / "bad.conf"
    conf.write_text("maxIndexNum=lots\n")
    r = run_info(str(root), "--broker-config", str(conf))
    assert r.exit_code == 1
    assert first_err(r) == f"error: {conf}:1: maxIndexNum='lots' is not a valid int"


def test_broker_conf_missing(tmp_path):
    root = copy_real_store("clean-2topics", tmp_path)
    r = run_info(str(root), "--broker-config", str(tmp_path / "none.conf"))
    assert r.exit_code == 1
    assert first_err(r) == f"error: {tmp_path / 'none.conf'}: broker config file not found"


def test_unreadable_broker_conf(tmp_path):
    root = copy_real_store("clean-2topics", tmp_path)
    conf = tmp_path / "dir.conf"
    conf.mkdir()  # reading a directory fails even for root
    r = run_info(str(root), "--broker-config", str(conf))
    assert r.exit_code == 1
    assert first_err(r).startswith(f"error: {conf}: cannot read:")


def test_unreadable_checkpoint(tmp_path):
    root = copy_real_store("delay-tx-retry", tmp_path)
    (root / "checkpoint").unlink()
    (root / "checkpoint").mkdir()
    r = run_info(str(root), "-f", "plain")
    assert r.exit_code == 3
    assert first_err(r).endswith(f"{root / 'checkpoint'} at byte 0: cannot read checkpoint: Is a directory")


def test_unreadable_index_file_by_mode(tmp_path):
    """As a user that file modes apply to: root runs it without the capabilities that bypass them."""
    root = copy_real_store("delay-tx-retry", tmp_path)
    idx = next((root / "index").iterdir())
    idx.chmod(0)
    prefix = []
    if os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            pytest.skip("root reads files whatever their mode, and setpriv is not installed to drop that right")
        prefix = ["setpriv", "--inh-caps=-all", "--ambient-caps=-all", "--bounding-set=-all", "--"]
    code = "import sys; from rmqstore.cli import main; sys.argv[0] = 'rmqstore'; main()"
    p = subprocess.run([*prefix, sys.executable, "-c", code, "info", str(root), "-f", "plain"],
                       capture_output=True, text=True)  # fmt: skip
    assert p.returncode == 3, p.stderr
    assert "cannot read" in p.stderr and str(idx) in p.stderr, p.stderr


def test_empty_dledger_member_leaves_a_plain_store_plain(tmp_path):
    # a member directory with no data files yet: the records are all in commitlog/, read as they are
    root = copy_real_store("delay-tx-retry", tmp_path)
    (root / "dledger-n0" / "data").mkdir(parents=True)
    r = run_info(str(root), "-f", "json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["commitLog"]["files"]


def test_internal_error_is_one_line(tmp_path, monkeypatch):
    root = copy_real_store("delay-tx-retry", tmp_path)

    def boom(*a, **k):
        raise RuntimeError("kaputt")

    monkeypatch.setattr(rmqstore.cli.info, "store_info", boom)
    r = run_info(str(root))
    assert r.exit_code == 1
    assert first_err(r).startswith("internal error: RuntimeError: kaputt")
    assert len(r.stderr.splitlines()) == 1


def test_console_script_has_no_traceback(tmp_path):
    exe = Path(sys.executable).with_name("rmqstore")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-c", "import rmqstore.cli; rmqstore.cli.main()"]
    proc = subprocess.run([*cmd, "info", str(tmp_path / "missing")], capture_output=True, text=True)
    assert proc.returncode == 5
    assert proc.stderr.strip() == f"error: {tmp_path / 'missing'}: no such directory"
    assert proc.stdout == ""


def test_errors_survive_pickling() -> None:
    """Worker processes send errors back pickled; every error keeps its message and fields."""
    import pickle

    from rmqstore import errors

    samples = [
        errors.CorruptData("bad magic", path="/s/commitlog/0", pos=12, phy_offset=12),
        errors.ChecksumMismatch(path="/s/commitlog/0", pos=40, phy_offset=40, stored=1, computed=2),
        errors.RecordSizeMismatch(path="/s/commitlog/0", pos=8, phy_offset=8, total_size=100, computed=99),
        errors.ConfigError("bad json", path="/s/config/topics.json", line=3),
        errors.InputError("nope"),
    ]
    for e in samples:
        back = pickle.loads(pickle.dumps(e))
        assert type(back) is type(e)
        assert str(back) == str(e)
        assert back.__dict__ == e.__dict__
        assert back.exit_code == e.exit_code


def test_spark_report_without_pyspark_names_the_extra(monkeypatch, tmp_path):
    """Without pyspark, spark report says which extra to install, in one line, before reading anything."""
    for name in [m for m in sys.modules if m == "rmqstore.spark" or m.startswith("rmqstore.spark.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "pyspark", None)
    r = runner.invoke(app, ["spark", "report", str(FIXTURES / "small" / "store"), "-o", str(tmp_path / "page.html")])
    assert r.exit_code == 1
    assert "Traceback" not in r.output
    line = first_err(r)
    assert line.startswith("error: the Spark commands need pyspark") and "pip install 'rmqstore[spark]'" in line
    assert not (tmp_path / "page.html").exists()
