"""The README's "Use it from Python" examples run as written, from the checkout."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from conftest import REPO


def python_blocks() -> list[str]:
    text = (REPO / "README.md").read_text()
    section = text.split("## Use it from Python", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, re.S)


def test_the_section_has_examples():
    blocks = python_blocks()
    assert len(blocks) >= 3
    assert "with open_store(" in blocks[0]  # the context manager is what the section says


@pytest.mark.parametrize("index", range(len(python_blocks())))
def test_example_runs(index):
    code = python_blocks()[index]
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip(), "an example prints what it shows"
    if index == 0:  # the small fixture holds 340 messages; the first is TopicA's order-0
        assert proc.stdout.split()[:2] == ["340", "TopicA"] and proc.stdout.split()[-1] == "order-0"
