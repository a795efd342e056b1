"""Names read from record bytes that cannot be directories (an LMQ name with '/', a topic 'a/b'):
reported with file, offset and the name escaped, left out of that queue as the broker's LMQ dispatch
does, the rest dispatched; recover, redispatch and check agree, and a journal an older failing run
left is finished. Tested on copies of the real 5.2.0 lmq-multi-dispatch and 4.4.0 stores."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import copy_real_store, data_files, kill_at_every_step
from typer.testing import CliRunner

from rmqstore.cli import app
from rmqstore.dispatch import multiqueue

runner = CliRunner()
LMQ = "5.2.0/lmq-multi-dispatch"
BAD = b"%LMQ%../../"  # as long as %LMQ%room-1: the record keeps its size


def lmq_store_with_unsafe_name(dest: Path) -> Path:
    """The real LMQ store, its last record naming %LMQ%room-1 naming %LMQ%../../ instead, crashed (abort)."""
    root = copy_real_store(LMQ, dest)
    files = sorted((root / "commitlog").iterdir())
    hits = [(f, f.read_bytes().rfind(b"%LMQ%room-1")) for f in files]
    f, at = [h for h in hits if h[1] >= 0][-1]
    with open(f, "r+b") as fh:
        fh.seek(at)
        fh.write(BAD)
    (root / "abort").write_bytes(b"")
    return root


def notes_of(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if "name queue '%LMQ%../../' 0, not dispatched there" in ln]


def test_redispatch_skips_the_name_and_check_agrees(tmp_path: Path) -> None:
    root = lmq_store_with_unsafe_name(tmp_path / "s")
    r = runner.invoke(app, ["redispatch", str(root), "-q", "--quarantine", str(tmp_path / "q")])
    assert r.exit_code == 0 and "internal error" not in r.output, r.output
    [note] = notes_of(r.stderr)
    assert f"{root}/commitlog/" in note and ": offset " in note and "INNER_MULTI_DISPATCH" in note
    assert not (root.parent / "x").exists() and not any(p.name.startswith("%LMQ%..") for p in root.rglob("*"))
    c = runner.invoke(app, ["check", str(root), "-f", "json"])
    problems = [p for p in json.loads(c.stdout)["problems"] if not p["path"].endswith("/abort")]  # crashed: abort
    problems = [p for p in problems if p["severity"] != "info"]
    assert c.exit_code == 3 and [p["severity"] for p in problems] == ["warning"], problems
    assert "'%LMQ%../../' 0, not dispatched there" in problems[0]["what"]
    d = runner.invoke(app, ["redispatch", str(root), "-q", "--dry-run"])
    assert d.exit_code == 0 and len(notes_of(d.stderr)) == 1 and "identical" not in d.stderr


def test_recover_goes_on_and_dry_run_predicts_it(tmp_path: Path) -> None:
    root = lmq_store_with_unsafe_name(tmp_path / "s")
    dry = runner.invoke(app, ["recover", str(root), "-q", "--dry-run"])
    assert dry.exit_code == 0, dry.output
    r = runner.invoke(app, ["recover", str(root), "-q", "--quarantine", str(tmp_path / "q")])
    assert r.exit_code == 0 and "internal error" not in r.output, r.output
    assert len(notes_of(r.stderr)) == 2 and set(notes_of(r.stderr)) == set(
        notes_of(dry.stderr)
    )  # plan, apply and not (root / ".rmqstore").exists() and not (root / "abort").exists()
    for argv in (["write", str(root), "--topic", "TopicLmqParent", "--body", "x"], ["redispatch", str(root), "-q"]):
        assert runner.invoke(app, argv).exit_code == 0  # nothing refuses the store afterwards


def test_journal_of_an_older_failing_run_is_finished(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An older build failed inside the LMQ dispatch (an internal error), leaving its journal: the
    next run resumes it and finishes, and a rollback is not needed."""
    root = lmq_store_with_unsafe_name(tmp_path / "s")
    q = tmp_path / "q"

    def old_put(self: multiqueue.ExtraDispatcher, rec: object) -> None:
        raise TypeError("CorruptData.__init__() missing 1 required keyword-only argument: 'path'")

    with monkeypatch.context() as m:
        m.setattr(multiqueue.ExtraDispatcher, "put", old_put)
        failed = runner.invoke(app, ["recover", str(root), "-q", "--quarantine", str(q)])
    assert failed.exit_code != 0 and (root / ".rmqstore").exists()
    assert runner.invoke(app, ["redispatch", str(root), "-q"]).exit_code == 8  # the journal comes first
    again = runner.invoke(app, ["recover", str(root), "-q", "--quarantine", str(q)])
    assert again.exit_code == 0 and "internal error" not in again.output, again.output
    assert not (root / ".rmqstore").exists() and not (root / "abort").exists()
    ref = lmq_store_with_unsafe_name(tmp_path / "ref")
    assert runner.invoke(app, ["recover", str(ref), "-q", "--quarantine", str(tmp_path / "qr")]).exit_code == 0
    assert data_files(root) == data_files(ref)


def test_recover_killed_at_every_step_ends_the_same(tmp_path: Path) -> None:
    kill_at_every_step(
        tmp_path,
        lmq_store_with_unsafe_name,
        lambda root, q: ["recover", str(root), "-q", "--quarantine", str(q)],
        data_files,
        {0},
        "recover:finished",
    )


def test_topic_a_slash_b_dry_run_check_and_recover_agree(tmp_path: Path) -> None:
    """A pending record of topic 'a/b...': the engine would write consumequeue/a/b.../QID, a directory its
    own load never reads back as that queue; rmqstore leaves those records out of any queue and says so,
    the same way in the dry run, the run and check."""
    from test_faults import patch_topics

    root = copy_real_store("crash-midwrite", tmp_path / "s")
    assert patch_topics(root, "crash-midwrite", b"a/bcde") > 0
    c = runner.invoke(app, ["check", str(root), "-f", "json"])
    warned = [p["what"] for p in json.loads(c.stdout)["problems"] if "name queue 'a/bcde'" in p["what"]]
    assert c.exit_code == 3 and warned, c.output
    dry = runner.invoke(app, ["recover", str(root), "-q", "--dry-run"])
    r = runner.invoke(app, ["recover", str(root), "-q", "--quarantine", str(tmp_path / "q")])
    assert dry.exit_code == r.exit_code == 0, (dry.output, r.output)

    def said(text: str) -> list[str]:
        return [ln.split(": offset ", 1)[1] for ln in text.splitlines() if "name queue 'a/bcde'" in ln]

    assert said(dry.stderr) and said(dry.stderr) == said(r.stderr)[: len(said(dry.stderr))]
    assert not (root / "consumequeue" / "a").exists()
