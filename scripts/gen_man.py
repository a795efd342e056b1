#!/usr/bin/env python3
"""Generate the roff man pages in ``man/`` from the typer app.

``rmqstore.1`` describes the program (commands, exit status from ``rmqstore.errors.EXIT_CODES``,
files); ``rmqstore-<verb>.1`` describes one top-level subcommand, or every command of a group.
Everything comes from the command tree (help texts, options, epilogs), so a page goes stale
exactly when the code changes. The output is deterministic: no dates, only the package version.

Usage: python3 scripts/gen_man.py [--check] [--out DIR]
  --check   write nothing; list stale, missing or extra pages and exit 1 if there are any
"""

from __future__ import annotations

import argparse
import inspect
import re
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import typer.main  # noqa: E402

import rmqstore.cli as commands  # noqa: E402
from rmqstore import __version__  # noqa: E402
from rmqstore.errors import EXIT_CODES  # noqa: E402

PROG = "rmqstore"
MAN_DIR = REPO / "man"
SOURCE = f"{PROG} {__version__}"
MANUAL = "User Commands"

FILES = (
    ("STORE/commitlog/", "commit log files, named by the 20-digit offset of their first byte"),
    ("STORE/consumequeue/TOPIC/QUEUEID/", "consume queue files, 20-byte entries"),
    ("STORE/index/", "index files, named by their creation time yyyyMMddHHmmssSSS"),
    ("STORE/checkpoint", "the broker's recovery timestamps (4096 bytes)"),
    ("STORE/abort", "present while a broker runs and after an unclean shutdown"),
    ("STORE/lock", "the broker holds a POSIX lock on its first byte while it runs"),
    ("STORE/config/*.json", "topics, consumer offsets, subscription groups, delay offsets"),
    ("broker.conf", "the broker's properties: STORE/broker.conf or STORE/../broker.conf, or --broker-config"),
    ("STORE/../NAME.quarantine/", "bytes and files removed by a command, with manifest.json to put them back"),
)


# ------------------------------------------------------------------------------------------ roff


def esc(text: str) -> str:
    """Escape text for roff: backslashes, hyphens (so options copy and paste), leading dots."""
    text = text.replace("\\", "\\e").replace("-", "\\-")
    return "\n".join(("\\&" + line) if line[:1] in (".", "'") else line for line in text.split("\n"))


def paragraphs(text: str | None) -> list[str]:
    """Docstring paragraphs with single line breaks joined (roff fills the lines)."""
    if not text:
        return []
    text = inspect.cleandoc(text)
    out = []
    for para in re.split(r"\n\s*\n", text):
        lines = [ln.strip() for ln in para.splitlines() if ln.strip()]
        if lines:
            out.append(" ".join(lines))
    return out


def literal_block(text: str) -> list[str]:
    """Epilogs (examples) keep their lines."""
    out = [".PP", ".nf", ".RS 4"]
    out += [esc(line.rstrip()) for line in inspect.cleandoc(text).splitlines()]
    out += [".RE", ".fi"]
    return out


def header(name: str, summary: str) -> list[str]:
    return [
        f'.TH "{name.upper()}" "1" "" "{SOURCE}" "{MANUAL}"',
        ".nh",  # no hyphenation: paths and option names must stay whole
        ".SH NAME",
        f"{esc(name)} \\- {esc(summary)}",
    ]


# ------------------------------------------------------------------------------------ command tree


def root_command() -> Any:
    return typer.main.get_command(commands.app)


def context(cmd: Any, name: str, parent: Any = None) -> Any:
    return cmd.context_class(cmd, info_name=name, parent=parent)


def visible_commands(group: Any, ctx: Any) -> list[tuple[str, Any]]:
    out = []
    for name in group.list_commands(ctx):
        cmd = group.get_command(ctx, name)
        if cmd is not None and not getattr(cmd, "hidden", False):
            out.append((name, cmd))
    return out


def is_group(cmd: Any) -> bool:
    return hasattr(cmd, "list_commands")


def first_line(text: str | None) -> str:
    paras = paragraphs(text)
    return paras[0] if paras else ""


def arguments(cmd: Any, ctx: Any) -> list[Any]:
    return [p for p in cmd.get_params(ctx) if p.param_type_name == "argument" and not getattr(p, "hidden", False)]


def options(cmd: Any, ctx: Any) -> list[Any]:
    """Visible options except --help, which every command has."""
    return [
        p
        for p in cmd.get_params(ctx)
        if p.param_type_name == "option" and not getattr(p, "hidden", False) and p.name != "help"
    ]


def arg_metavar(p: Any) -> str:
    name = (p.metavar or p.name or "ARG").upper()
    if p.nargs == -1:
        name += "..."
    return name if p.required else f"[{name}]"


def synopsis(words: str, cmd: Any, ctx: Any) -> list[str]:
    """``.B rmqstore info`` then ``[OPTIONS] STORE``, one line per command."""
    parts = [f".B {esc(words)}"]
    usage = ["[\\fIOPTIONS\\fR]"] if options(cmd, ctx) else []
    if is_group(cmd):
        usage.append("\\fICOMMAND\\fR [\\fIARGS\\fR]...")
    usage += [f"\\fI{esc(arg_metavar(p))}\\fR" for p in arguments(cmd, ctx)]
    if usage:
        parts.append(" ".join(usage))
    return [*parts, ".br"]


def option_label(names: str) -> str:
    """``-c, --broker-config <path>`` -> bold names, italic value."""
    m = re.fullmatch(r"(.*?)(?:\s+<([^>]*)>)?", names.strip())
    assert m is not None  # the pattern matches any string
    label = f"\\fB{esc(m.group(1))}\\fR"
    return label + (f" \\fI{esc(m.group(2))}\\fR" if m.group(2) else "")


def param_items(cmd: Any, ctx: Any) -> tuple[list[str], list[str]]:
    """(.TP items for arguments, .TP items for options)."""
    args: list[str] = []
    for p in arguments(cmd, ctx):
        _, help_text = p.get_help_record(ctx) or ("", "")
        args += [".TP", f"\\fI{esc(arg_metavar(p).strip('[]'))}\\fR", esc(help_text or "")]
    opts: list[str] = []
    for p in options(cmd, ctx):
        record = p.get_help_record(ctx)
        if record is not None:
            opts += [".TP", option_label(record[0]), esc(record[1] or "")]
    return args, opts


def describe_command(cmd: Any, ctx: Any, *, nested: bool) -> list[str]:
    """Help, arguments, options and examples of one command; ``nested`` inside a group's page."""
    out: list[str] = []
    for para in paragraphs(cmd.help):
        out += [".PP", esc(para)]
    args, opts = param_items(cmd, ctx)
    for title, items in (("Arguments", args), ("Options", opts)):
        if items:
            out += [".PP", f"\\fB{title}\\fR", *items] if nested else [f".SH {title.upper()}", *items]
    if cmd.epilog:
        out += [".PP", "\\fBExamples\\fR"] if nested else [".SH EXAMPLES"]
        out += literal_block(cmd.epilog)
    return out


# --------------------------------------------------------------------------------------- the pages


def main_page(root: Any, ctx: Any) -> str:
    subs = visible_commands(root, ctx)
    lines = header(PROG, "offline admin toolkit for Apache RocketMQ broker store directories")
    lines += [".SH SYNOPSIS", *synopsis(PROG, root, ctx)]
    lines += [".SH DESCRIPTION"]
    for para in paragraphs(root.help):
        lines += [".PP", esc(para)]
    lines += [
        ".PP",
        esc(
            "Each command takes the store root directory (storePathRootDir) as its first argument. "
            "Data goes to standard output, diagnostics and progress to standard error. "
            "Commands that change files take the broker's lock first, print their plan with --dry-run, "
            "move removed bytes to a quarantine folder and write through a temporary file, fsync and rename."
        ),
    ]
    _, opts = param_items(root, ctx)
    if opts:
        lines += [".SH OPTIONS", *opts]
    lines += [".SH COMMANDS"]
    for name, cmd in subs:
        lines += [".TP", f"\\fB{esc(name)}\\fR", esc(first_line(cmd.help) or cmd.get_short_help_str(limit=200))]
        lines += [f"See \\fB{esc(PROG)}\\-{esc(name)}\\fR(1)."]
    lines += [".SH EXIT STATUS"]
    for code, text in sorted(EXIT_CODES.items()):
        lines += [".TP", f"\\fB{code}\\fR", esc(text)]
    lines += [
        ".SH ENVIRONMENT",
        ".TP",
        "\\fBRMQSTORE_TRACEBACK\\fR",
        esc("Set to 1 to see the traceback of an internal error."),
        ".TP",
        "\\fBRMQSTORE_SPARK_CLASS_CACHE\\fR",
        esc(
            "Set to off to start Spark drivers without the class archive kept in "
            "$XDG_CACHE_HOME/rmqstore/spark-classes (~/.cache by default)."
        ),
        ".TP",
        "\\fBOPENBLAS_NUM_THREADS\\fR",
        esc("Threads of numpy's BLAS; rmqstore sets 1 when it is unset, as no command multiplies matrices."),
    ]
    lines += [".SH FILES"]
    for path, what in FILES:
        lines += [".TP", f"\\fI{esc(path)}\\fR", esc(what)]
    lines += [".SH SEE ALSO", ",\n".join(f"\\fB{esc(PROG)}\\-{esc(name)}\\fR(1)" for name, _ in subs)]
    return "\n".join(lines) + "\n"


def command_page(name: str, cmd: Any, ctx: Any) -> str:
    words = f"{PROG} {name}"
    lines = header(f"{PROG}-{name}", first_line(cmd.help).rstrip(".") or name)
    lines += [".SH SYNOPSIS"]
    if not is_group(cmd):
        lines += synopsis(words, cmd, ctx)
        lines += [".SH DESCRIPTION", *describe_command(cmd, ctx, nested=False)]
    else:
        subs = [(n, c, context(c, n, ctx)) for n, c in visible_commands(cmd, ctx)]
        for sub_name, sub, sctx in subs:
            lines += synopsis(f"{words} {sub_name}", sub, sctx)
        lines += [".SH DESCRIPTION"]
        for para in paragraphs(cmd.help):
            lines += [".PP", esc(para)]
        _, group_opts = param_items(cmd, ctx)
        if group_opts:
            lines += [".SH OPTIONS", *group_opts]
        lines += [".SH COMMANDS"]
        for sub_name, sub, sctx in subs:
            lines += [f'.SS "{esc(words)} {esc(sub_name)}"', *synopsis(f"{words} {sub_name}", sub, sctx)]
            lines += describe_command(sub, sctx, nested=True)
        if cmd.epilog:
            lines += [".SH EXAMPLES", *literal_block(cmd.epilog)]
    lines += [
        ".SH EXIT STATUS",
        esc(f"0 on success (a dry run included); see {PROG}(1) for every code."),
        ".SH SEE ALSO",
        f"\\fB{esc(PROG)}\\fR(1)",
    ]
    return "\n".join(lines) + "\n"


def render_all() -> dict[str, str]:
    """File name -> page text for the whole command tree."""
    root = root_command()
    ctx = context(root, PROG)
    pages = {f"{PROG}.1": main_page(root, ctx)}
    for name, cmd in visible_commands(root, ctx):
        pages[f"{PROG}-{name}.1"] = command_page(name, cmd, context(cmd, name, ctx))
    return pages


def stale_pages(out_dir: Path, pages: dict[str, str]) -> list[str]:
    """Human-readable reasons why ``out_dir`` does not match ``pages``."""
    reasons = []
    for name, text in sorted(pages.items()):
        path = out_dir / name
        if not path.exists():
            reasons.append(f"{path}: missing")
        elif path.read_text(encoding="utf-8") != text:
            reasons.append(f"{path}: stale")
    for path in sorted(out_dir.glob(f"{PROG}*.1")):
        if path.name not in pages:
            reasons.append(f"{path}: no such command any more")
    return reasons


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="report stale pages, write nothing")
    ap.add_argument("--out", type=Path, default=MAN_DIR, help="output directory (default: man/)")
    args = ap.parse_args(argv)
    pages = render_all()
    if args.check:
        reasons = stale_pages(args.out, pages)
        for r in reasons:
            print(r)
        if reasons:
            print("regenerate with: python3 scripts/gen_man.py", file=sys.stderr)
        return 1 if reasons else 0
    args.out.mkdir(parents=True, exist_ok=True)
    for path in sorted(args.out.glob(f"{PROG}*.1")):
        if path.name not in pages:
            path.unlink()
    for name, text in pages.items():
        (args.out / name).write_text(text, encoding="utf-8")
    print(f"wrote {len(pages)} pages to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
