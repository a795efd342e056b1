"""Run one rmqstore command line in this process with a step hook injected into the command layer.

``python tests/killrun.py STEP N RECORD ARGS...``: SIGKILL this process the N-th time the operation
reports STEP (``-`` never kills); every step reported is appended to the file RECORD (``-``: none).
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import rmqstore.cli._common as common  # noqa: E402
from rmqstore.cli import main  # noqa: E402


def run() -> None:
    kill_at, count, record = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    seen = 0

    def hook(step: str) -> None:
        nonlocal seen
        if record != "-":
            with open(record, "a") as f:
                f.write(step + "\n")
        if step == kill_at:
            seen += 1
            if seen == count:
                os.kill(os.getpid(), signal.SIGKILL)

    common.set_step_hook(hook)
    sys.argv = ["rmqstore", *sys.argv[4:]]
    main()


if __name__ == "__main__":
    run()
