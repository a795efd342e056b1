"""Run the command line in a real pseudo-terminal of a given size, as an operator's shell would.

``run_in_pty(argv, cols=80, rows=40)`` starts the process with stdin, stdout and stderr on the
terminal (or stderr alone, or stdin and stdout alone, as asked), answers prompts with ``answers``
(each sent when its prompt text shows), and returns what the terminal showed and the exit status.
"""

from __future__ import annotations

import fcntl
import os
import re
import select
import struct
import subprocess
import sys
import termios
import time
from dataclasses import dataclass
from pathlib import Path

CLI = [sys.executable, "-m", "rmqstore.cli"]
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


@dataclass
class PtyRun:
    raw: str  # every byte the terminal got, escape sequences included
    code: int
    stdout: str = ""  # what went to a pipe, when stdout was not the terminal

    @property
    def screen_lines(self) -> list[str]:
        """The lines as shown: escapes gone, a carriage return's overwritten text dropped."""
        lines = []
        for line in ANSI.sub("", self.raw).replace("\r\n", "\n").split("\n"):
            lines.append(line.rsplit("\r", 1)[-1])
        while lines and not lines[-1]:
            lines.pop()
        return lines


def _set_size(fd: int, cols: int, rows: int) -> None:
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


def run_in_pty(
    argv: list[str],
    *,
    cols: int = 80,
    rows: int = 40,
    env: dict[str, str] | None = None,
    answers: dict[str, str] | None = None,
    stdout_tty: bool = True,
    stdin_tty: bool = True,
    timeout: float = 120,
    cwd: Path | None = None,
) -> PtyRun:
    """Run ``rmqstore argv`` with its streams on a new terminal of ``cols`` x ``rows``."""
    master, slave = os.openpty()
    _set_size(slave, cols, rows)
    base = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "NO_COLOR", "TERM")}
    full_env = {**base, "TERM": "xterm-256color", **(env or {})}
    proc = subprocess.Popen(
        [*CLI, *argv],
        stdin=slave if stdin_tty else subprocess.DEVNULL,
        stdout=slave if stdout_tty else subprocess.PIPE,
        stderr=slave,
        env=full_env,
        cwd=cwd,
        start_new_session=True,
    )
    os.close(slave)
    pending = dict(answers or {})
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.1)
        if ready:
            try:
                data = os.read(master, 65536)
            except OSError:  # the terminal closed: the process is gone
                break
            if not data:
                break
            chunks.append(data)
            seen = b"".join(chunks).decode("utf-8", "replace")
            for prompt in [p for p in pending if p in seen]:
                os.write(master, pending.pop(prompt).encode())
        elif proc.poll() is not None and not ready:
            break
    out = proc.stdout.read().decode() if proc.stdout is not None else ""
    code = proc.wait(timeout=max(deadline - time.monotonic(), 1))
    os.close(master)
    return PtyRun(b"".join(chunks).decode("utf-8", "replace"), code, out)
