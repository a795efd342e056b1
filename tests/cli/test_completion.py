"""Shell completion scripts for the shell the user names, even where no shell can be detected."""

from __future__ import annotations

import subprocess
import sys

import pytest

# The console script's entry point with typer's shell detection failing, as it does under cron or
# nohup, where no shell is among the process's ancestors.
_NO_SHELL_ABOVE = (
    "import sys, shellingham\n"
    "def fail(*a, **k):\n"
    "    raise shellingham.ShellDetectionFailure()\n"
    "shellingham.detect_shell = fail\n"
    "sys.argv = ['rmqstore', *sys.argv[1:]]\n"
    "from rmqstore.cli import main\n"
    "main()\n"
)


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", _NO_SHELL_ABOVE, *args], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(
    ("shell", "marker"),
    [("bash", "complete -o"), ("zsh", "#compdef rmqstore"), ("fish", "complete --command rmqstore")],
)
def test_show_completion_uses_the_named_shell(shell: str, marker: str) -> None:
    r = _run("--show-completion", shell)
    assert r.returncode == 0, r.stderr
    assert marker in r.stdout and "_RMQSTORE_COMPLETE" in r.stdout


def test_without_a_shell_name_or_a_shell_above_it_says_so() -> None:
    r = _run("--show-completion")
    assert r.returncode == 1 and "not supported" in r.stderr and r.stdout == ""
