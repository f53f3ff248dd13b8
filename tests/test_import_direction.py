"""One import direction (issue 35, item 2): read from the code with `ast`, every import of a
package module (``from .x import``, ``from statemachine_agent.x import``, ``import
statemachine_agent.x``), at module level, under ``TYPE_CHECKING`` and inside functions, goes to
a module of the same layer or one below it; and no module imports another module's underscore
name except the documented exceptions below."""

from __future__ import annotations

import ast
from pathlib import Path

import statemachine_agent

PACKAGE = Path(statemachine_agent.__file__).parent

# The layers, lowest first: a module imports only from its own layer or those below. A module
# is matched by its dotted name, or by its package (``session``) when it is not listed itself.
LAYERS: list[tuple[str, ...]] = [
    # helpers and the vocabulary: messages, states, events and what they are made of; the loop's
    # data and guards; configuration read by a run
    (
        "_jsonable", "_strict_json", "_dataclasses", "_compact", "_cuts", "_cancel", "_importing", "_errors", "_states", "_messages",
        "_events", "_accounting", "_context", "_protocol", "_responses", "_hooks", "_tools",
        "_execution", "_limits", "_output", "_result", "_session_seam", "_guards",
        "_compaction_config", "_tool_calls", "_call_tasks", "_call_results", "_call_context", "_continuing",
        "_sources", "models", "workspace",
    ),
    ("_conversation", "_bus", "_settings"),
    ("_definition", "_checked", "_run_protocol", "_machine", "_diagram"),
    ("_effects", "_compacting", "_bindings"),
    ("_run",),
    ("_handles",),
    ("_agent_base", "_agent", "_subagent"),
    ("session", "durable", "otel", "testing", "cli", "_worker_registry", "demo", "__init__",
     "__main__", "mcp"),
]  # fmt: skip

# Imports against the direction that remain, each with its reason. Nothing else may be added.
KNOWN_UPWARD: dict[tuple[str, str], str] = {}

# Underscore names imported from another module, with the reason each is allowed.
PRIVATE_IMPORTS: dict[tuple[str, str], str] = {}


def _layer(module: str) -> int:
    parts = module.split(".")
    for name in (module, parts[0]):
        for index, layer in enumerate(LAYERS):
            if name in layer:
                return index
    raise AssertionError(f"module {module!r} has no layer in LAYERS: add it to the table")


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).with_suffix("")
        parts = list(relative.parts)
        if parts[-1] == "__init__" and len(parts) > 1:
            parts.pop()
        found[".".join(parts)] = path
    return found


def _imports(module: str, path: Path) -> list[tuple[str, list[str], int]]:
    """``(imported module, names, line)`` for every import of a package module in ``path``."""
    package = module.split(".")[:-1] if path.name != "__init__.py" else module.split(".")
    if module == "__init__":
        package = []
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)] if node.level > 1 else package
                target = [*base, *(node.module.split(".") if node.module else [])]
            elif node.module and node.module.split(".")[0] == "statemachine_agent":
                target = node.module.split(".")[1:]
            else:
                continue
            names = [alias.name for alias in node.names]
            if not target:  # from . import x: a module of the package, or a name of __init__
                modules = _modules()
                found.extend(
                    (name, [], node.lineno)
                    if name in modules
                    else ("__init__", [name], node.lineno)
                    for name in names
                )
            else:
                found.append((".".join(target), names, node.lineno))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == "statemachine_agent" and len(parts) > 1:
                    found.append((".".join(parts[1:]), [], node.lineno))
    return found


def _top(module: str) -> str:
    return module.split(".")[0]


def test_no_module_imports_one_above_it() -> None:
    problems = []
    used: set[tuple[str, str]] = set()
    for module, path in _modules().items():
        for target, _names, line in _imports(module, path):
            if _top(target) == _top(module):
                continue  # inside one package, or the module itself
            if _layer(target) > _layer(module):
                key = (module, _top(target))
                if key in KNOWN_UPWARD:
                    used.add(key)
                    continue
                problems.append(
                    f"{path.relative_to(PACKAGE.parent)}:{line} imports {target} (layer "
                    f"{_layer(target)}) from layer {_layer(module)}"
                )
    assert problems == []
    stale = set(KNOWN_UPWARD) - used
    assert not stale, f"exceptions no longer needed: remove {stale}"


def test_no_underscore_name_is_imported_from_another_module() -> None:
    problems = []
    for module, path in _modules().items():
        for target, names, line in _imports(module, path):
            if _top(target) == _top(module):
                continue  # a package's own modules share its private names
            for name in names:
                if name.startswith("_") and not name.startswith("__"):
                    if (target, name) in PRIVATE_IMPORTS:
                        continue
                    problems.append(f"{path.relative_to(PACKAGE.parent)}:{line}: {target}.{name}")
    assert problems == []


def test_no_agent_private_reads_outside_the_agent() -> None:
    problems = []
    for module, path in _modules().items():
        if module in ("_agent", "_agent_base"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Attribute)
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
                and isinstance(node.value, ast.Name)
                and node.value.id in ("agent", "old", "new")
            ):
                problems.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}: {node.attr}")
    assert problems == []


# Private attributes read outside the package (or core module) that defines them, allowed:
PRIVATE_READS = {
    # DBOS 3.4 has no public call that re-queues a dead worker's runs (what DBOS Conductor calls).
    "durable._worker": {"_recover_pending_workflows"},
}
# One class split over two modules for size: they share their private names.
SAME_OWNER = {"_agent_base": "_agent"}


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _defined_privates(tree: ast.AST) -> set[str]:
    """The private names ``tree`` defines: functions, classes, assigned attributes and names,
    annotated fields, parameters, slot names, imported names."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            names.add(node.value)  # __slots__ = ("_x", ...)
        elif isinstance(node, ast.ImportFrom):
            names.update(alias.asname or alias.name for alias in node.names)
    return {name for name in names if _private(name)}


def test_no_private_attribute_is_read_outside_the_package_that_defines_it() -> None:
    """No ``x._private`` read across modules: an attribute read (``obj._x``, ``self._x`` of a
    base class, ``super()._x``) names a private attribute only where the module's own package
    (a core module: the module itself) defines it. A subclass elsewhere overrides public hooks
    (`Run.build_request`, `BatchRun.run_call`), never private ones."""
    trees = {
        module: ast.parse(path.read_text(encoding="utf-8")) for module, path in _modules().items()
    }
    owner = {module: SAME_OWNER.get(_top(module), _top(module)) for module in trees}
    defined: dict[str, set[str]] = {}
    for module, tree in trees.items():
        defined.setdefault(owner[module], set()).update(_defined_privates(tree))
    problems = []
    for module, tree in trees.items():
        allowed = defined[owner[module]] | PRIVATE_READS.get(module, set())
        for node in ast.walk(tree):
            if not isinstance(node, ast.Attribute) or not _private(node.attr):
                continue
            value = node.value
            from_super = (
                isinstance(value, ast.Call)
                and isinstance(value.func, ast.Name)
                and value.func.id == "super"
            )
            if from_super or node.attr not in allowed:
                problems.append(f"{module}:{node.lineno}: {ast.unparse(node)}")
    assert problems == []


MAX_MODULE_LINES = 600


def test_no_package_module_is_over_600_lines() -> None:
    """Modules of one subject, each small enough to read in one sitting: none of the package's
    modules is over 600 lines (split by subject when one grows past it)."""
    sizes = {
        str(path.relative_to(PACKAGE)): len(path.read_text(encoding="utf-8").splitlines())
        for path in sorted(PACKAGE.rglob("*.py"))
    }
    assert len(sizes) > 100
    over = {name: lines for name, lines in sizes.items() if lines > MAX_MODULE_LINES}
    assert not over, f"modules over {MAX_MODULE_LINES} lines: {over}"
