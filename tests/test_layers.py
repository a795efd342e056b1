"""The layers of rmqstore/, read from its source with ``ast``.

Every import counts: at module level, inside functions and under ``if TYPE_CHECKING:``; relative
imports are resolved, and importing a package is an import of its ``__init__``. The graph must have
no cycle, few imports inside functions and no shim module; each package imports only the layers
below it, no operation imports another, and only the codec and the walk look for record magics.

``python tests/test_layers.py`` prints a summary of the graph.
"""

from __future__ import annotations

import ast
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "rmqstore"
BASE = frozenset({"rmqstore", "rmqstore.errors", "rmqstore.problems", "rmqstore.rules", "rmqstore.timeparse"})
# lowest first: each imports only itself, the base modules and the packages before it
LAYERS = ("codec", "safety", "store", "walk", "dispatch", "ops")
MAX_LAZY_IMPORTS = 5
# the commit log record magics (§3.1, §3.4): by name, as ints (unsigned and as Java's int) and as bytes
MAGIC_NAMES = frozenset({"MAGIC_V1", "MAGIC_V2", "BLANK_MAGIC"})
_MAGIC_WORDS = (0xDAA320A7, 0xDAA320AB, 0xCBD43194)
MAGIC_INTS = frozenset(v for w in _MAGIC_WORDS for v in (w, w - 2**32))
MAGIC_BYTES = tuple(w.to_bytes(4, "big") for w in _MAGIC_WORDS)
# calls that search for a value: bytes and str methods, regular expressions, numpy
SEARCHES = frozenset(
    "find rfind index rindex count startswith endswith search match fullmatch finditer findall "
    "isin flatnonzero nonzero where searchsorted".split()
)
# the layers that read record heads; at most this many modules elsewhere may look at a magic
MAGIC_LAYERS = ("codec", "walk")
MAX_MAGIC_MODULES = 1


@dataclass(frozen=True)
class Module:
    name: str
    path: Path
    tree: ast.Module

    @property
    def is_package(self) -> bool:
        return self.path.name == "__init__.py"


@dataclass(frozen=True)
class Import:
    source: str  # the importing module
    target: str  # the rmqstore module it imports
    line: int
    lazy: bool  # inside a function

    def __str__(self) -> str:
        return f"{self.source}:{self.line} imports {self.target}"


@cache
def modules() -> dict[str, Module]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = Module(name, path, ast.parse(path.read_text(), str(path)))
    return out


def _known(name: str) -> str | None:
    """The longest rmqstore module ``name`` starts with (``rmqstore.codec.commitlog.Record`` -> its module)."""
    while name and name not in modules():
        name = name.rpartition(".")[0]
    return name or None


def _targets(mod: Module, node: ast.Import | ast.ImportFrom) -> Iterator[str]:
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        prefix = node.module or ""
        if node.level:
            base = mod.name.split(".")[: None if mod.is_package else -1]
            base = base[: len(base) - node.level + 1]
            prefix = ".".join(base + ([node.module] if node.module else []))
        # `from package import name` imports the submodule when there is one, else the package
        names = [f"{prefix}.{a.name}" if f"{prefix}.{a.name}" in modules() else prefix for a in node.names]
    for name in names:
        target = _known(name)
        if target is not None and target != mod.name:
            yield target


def _imports_of(mod: Module, node: ast.AST, lazy: bool) -> Iterator[Import]:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.Import | ast.ImportFrom):
            yield from (Import(mod.name, t, child.lineno, lazy) for t in _targets(mod, child))
        inner = lazy or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
        yield from _imports_of(mod, child, inner)


@cache
def imports() -> tuple[Import, ...]:
    return tuple(dict.fromkeys(i for m in modules().values() for i in _imports_of(m, m.tree, False)))


def graph() -> dict[str, set[str]]:
    out: dict[str, set[str]] = {name: set() for name in modules()}
    for i in imports():
        out[i.source].add(i.target)
    return out


def _reachable(g: dict[str, set[str]], start: str) -> set[str]:
    seen: set[str] = set()
    todo = list(g[start])
    while todo:
        m = todo.pop()
        if m not in seen:
            seen.add(m)
            todo += g[m]
    return seen


def cycles() -> list[list[str]]:
    """The groups of modules that import each other, directly or through others."""
    g = graph()
    reach = {m: _reachable(g, m) for m in g}
    groups = {frozenset(n for n in reach[m] if m in reach[n]) for m in g if m in reach[m]}
    return sorted(sorted(c) for c in groups)


def layer(name: str) -> str | None:
    if name in BASE:
        return "base"
    part = name.split(".")[1]
    return part if part in LAYERS or part == "spark" else None


def allowed(source_layer: str | None) -> set[str]:
    if source_layer == "base":
        return {"base"}
    if source_layer == "spark":
        return {"base", "spark", *LAYERS} - {"ops"}
    if source_layer in LAYERS:
        return {"base", *LAYERS[: LAYERS.index(source_layer) + 1]}
    return set()


def layer_violations() -> list[str]:
    return [
        f"{i} ({layer(i.source)} may not import {layer(i.target)})"
        for i in imports()
        if layer(i.target) not in allowed(layer(i.source))
    ]


def operation(name: str) -> str | None:
    """The operation a module of ``rmqstore.ops`` belongs to: ``ops.write.plan`` -> ``write``."""
    parts = name.split(".")
    return parts[2] if len(parts) > 2 and parts[1] == "ops" else None


def operation_imports() -> list[str]:
    return [
        str(i)
        for i in imports()
        if operation(i.source) and operation(i.target) and operation(i.source) != operation(i.target)
    ]


def _is_sys_modules(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Attribute)
        and node.attr == "modules"
        and isinstance(node.value, ast.Name)
        and node.value.id == "sys"
    )


def _rebinds_sys_modules(stmt: ast.stmt) -> bool:
    if isinstance(stmt, ast.Assign | ast.AugAssign | ast.AnnAssign):
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        return any(isinstance(t, ast.Subscript) and _is_sys_modules(t.value) for t in targets)
    call = stmt.value if isinstance(stmt, ast.Expr) else None
    return isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and _is_sys_modules(call.func.value)


def _only_binds_names(stmt: ast.stmt) -> bool:
    """An import, ``__all__``, or a plain alias such as ``Record = commitlog.Record``."""
    if isinstance(stmt, ast.Import | ast.ImportFrom):
        return True
    return isinstance(stmt, ast.Assign) and (
        any(isinstance(t, ast.Name) and t.id == "__all__" for t in stmt.targets)
        or isinstance(stmt.value, ast.Name | ast.Attribute)
    )


def shims() -> list[str]:
    """Modules that only re-bind ``sys.modules`` or only hand on the names of one other module."""
    out = []
    for mod in modules().values():
        body = [
            s
            for s in mod.tree.body
            if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant) and isinstance(s.value.value, str))
            and not (isinstance(s, ast.ImportFrom) and s.module == "__future__")
        ]
        rebinds = [s for s in body if _rebinds_sys_modules(s)]
        targets = {i.target for i in imports() if i.source == mod.name}
        if rebinds and all(isinstance(s, ast.Import | ast.ImportFrom) for s in body if s not in rebinds):
            out.append(f"{mod.name}: only re-binds sys.modules (line {rebinds[0].lineno})")
        elif body and len(targets) == 1 and all(_only_binds_names(s) for s in body):
            out.append(f"{mod.name}: only re-exports {targets.pop()}")
    return out


def _int_value(node: ast.AST) -> int | None:
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = _int_value(node.operand)
        return None if inner is None else -inner
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    return None


def _mentions_magic(node: ast.AST, names: set[str]) -> bool:
    for n in ast.walk(node):
        if (
            (isinstance(n, ast.Name) and n.id in names)
            or (isinstance(n, ast.Attribute) and n.attr in MAGIC_NAMES)
            or _int_value(n) in MAGIC_INTS
            or (isinstance(n, ast.Constant) and isinstance(n.value, bytes) and any(b in n.value for b in MAGIC_BYTES))
        ):
            return True
    return False


def _magic_names(tree: ast.Module) -> set[str]:
    """The magics' names, their aliases, and names bound to values made of them (``_MAGICS = (...)``)."""
    names = set(MAGIC_NAMES)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            names |= {a.asname for a in node.names if a.name in MAGIC_NAMES and a.asname}
    while True:
        bound = {
            t.id
            for node in ast.walk(tree)
            if isinstance(node, ast.Assign) and _mentions_magic(node.value, names)
            for t in node.targets
            if isinstance(t, ast.Name)
        }
        if bound <= names:
            return names
        names |= bound


def _searches_magic(node: ast.AST, names: set[str]) -> bool:
    if isinstance(node, ast.Compare):
        return _mentions_magic(node, names)
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    called = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    args = [*node.args, *(k.value for k in node.keywords)]
    return called in SEARCHES and any(_mentions_magic(a, names) for a in args)


def magic_lines(mod: Module) -> list[int]:
    """Lines where ``mod`` compares a value with a record magic or searches for one."""
    names = _magic_names(mod.tree)
    return sorted({n.lineno for n in ast.walk(mod.tree) if _searches_magic(n, names)})


def magic_modules() -> dict[str, list[int]]:
    """The modules outside the codec and the walk that look for record magics, with the lines."""
    found = {m.name: magic_lines(m) for m in modules().values() if layer(m.name) not in MAGIC_LAYERS}
    return {name: lines for name, lines in found.items() if lines}


def _listed(items: list[str]) -> str:
    return "".join(f"\n  {x}" for x in items)


def test_no_import_cycles():
    found = cycles()
    text = [f"{', '.join(c)}:" + _listed([str(i) for i in imports() if i.source in c and i.target in c]) for c in found]
    assert not found, "modules that import each other:" + _listed(text)


def test_few_imports_inside_functions():
    lazy = [str(i) for i in imports() if i.lazy]
    assert len(lazy) <= MAX_LAZY_IMPORTS, f"{len(lazy)} rmqstore imports inside functions:" + _listed(lazy)


def test_no_shim_modules():
    assert not shims(), "shim modules:" + _listed(shims())


def test_every_module_is_in_a_layer():
    stray = [m for m in modules() if layer(m) is None]
    assert not stray, f"modules in no layer (base, {', '.join(LAYERS)}, spark):" + _listed(stray)


def test_layer_order():
    assert not layer_violations(), "imports of a higher layer:" + _listed(layer_violations())


def test_only_spark_imports_spark():
    wrong = [str(i) for i in imports() if layer(i.target) == "spark" and layer(i.source) != "spark"]
    assert not wrong, "imports of rmqstore.spark from outside it:" + _listed(wrong)


def test_operations_import_no_other_operation():
    assert not operation_imports(), "operations importing another operation:" + _listed(operation_imports())


def test_record_magics_read_in_codec_and_walk():
    found = magic_modules()
    text = [f"{name}: lines {', '.join(map(str, lines))}" for name, lines in found.items()]
    assert len(found) <= MAX_MAGIC_MODULES, (
        f"{len(found)} modules outside {' and '.join(MAGIC_LAYERS)} look for record magics:" + _listed(text)
    )


def summary() -> str:
    """The graph in a few lines: modules per layer, imports between layers, and what the tests check."""
    g = graph()
    per_layer = Counter(layer(m) or "?" for m in g)
    between = Counter((layer(i.source), layer(i.target)) for i in imports() if layer(i.source) != layer(i.target))
    lines = [f"{len(g)} modules, {sum(map(len, g.values()))} imports between them"]
    lines += [
        f"  {name:<9} {per_layer[name]:>3} modules" for name in ("base", *LAYERS, "spark", "?") if per_layer[name]
    ]
    lines.append("imports between layers:")
    lines += [f"  {a:>9} -> {b:<9} {n:>3}" for (a, b), n in sorted(between.items(), key=lambda kv: str(kv[0]))]
    checks = {
        "cycles": [", ".join(c) for c in cycles()],
        "imports inside functions": [str(i) for i in imports() if i.lazy],
        "shim modules": shims(),
        "imports of a higher layer": layer_violations(),
        "operations importing another operation": operation_imports(),
        "modules outside codec and walk looking for record magics": [
            f"{name}: lines {', '.join(map(str, found))}" for name, found in magic_modules().items()
        ],
    }
    lines += [f"{what}: {len(items)}" + _listed(items) for what, items in checks.items()]
    return "\n".join(lines)


if __name__ == "__main__":
    print(summary())
