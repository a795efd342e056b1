"""Options several subcommands take, declared once: the same name, short form and help everywhere."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ._common import TIME_FORMS
from ._render import Format

FmtOpt = Annotated[
    Format | None, typer.Option("--format", "-f", help="Output format (default: table on a terminal, else plain).")
]
QuarantineOpt = Annotated[
    Path | None,
    typer.Option(
        "--quarantine",
        help="Folder for the removed bytes and replaced files (default: STORE/../<name>.quarantine/<time>).",
    ),
]
NoQuarantineOpt = Annotated[
    bool, typer.Option("--no-quarantine", help="Do not keep the removed bytes and replaced files.")
]
TopicFilterOpt = Annotated[str | None, typer.Option("--topic", "-t", help="Only this topic.")]
SinceOpt = Annotated[str | None, typer.Option("--since", help=f"Store time from ({TIME_FORMS}).")]
UntilOpt = Annotated[str | None, typer.Option("--until", help="Store time up to, inclusive (same forms as --since).")]
