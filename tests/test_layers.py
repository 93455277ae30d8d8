"""The layers of docs/design.md, checked on the source: every import of every sosext module
(at module level, inside functions, and under TYPE_CHECKING alike) points down.

hosts → commands → render → clr (model) → dac → targets; ``errors``, ``interrupts`` and ``files`` sit
below them all. Commands, render and hosts never import ``sosext.dac``: whatever they need
of the runtime is a model method. Inside ``sosext/clr`` no module imports, even for a type
hint only, a module that imports it back, directly or through others: the heap and the
runtime are façades over pieces that do not know them (see clr/parts.py).
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "sosext"

# Rank of each top-level part of the package: an import may only go to an equal or lower rank.
RANKS = {
    "errors": 0, "interrupts": 0, "files": 0, "pycheck": 0, "version": 0,
    "targets": 1, "ipc": 1,
    "readers": 1.5,  # records and the reader protocol both readers share
    "formats": 1.5,  # pure parsers (ECMA-335 metadata, PDBs, GC info) both readers and the model use
    "dac": 2, "contracts": 2,
    "clr": 3,
    "render": 4,
    "report": 4.5,  # reads the model, renders through render/; only commands use it
    "commands": 5, "session": 5,
    "hosts": 6, "api": 6, "cli": 6, "repl": 6, "install": 6, "__main__": 6, "__init__": 6,
}
NO_DAC = ("commands", "render", "report", "hosts", "cli", "repl", "session", "api")


def module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path) -> set[str]:
    """Every sosext module ``path`` imports, as dotted names (``from x import y`` counts
    ``x.y`` when that is a module, else ``x``)."""
    name = module_name(path)
    is_package = path.name == "__init__.py"
    tree = ast.parse(path.read_text(), str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == "sosext")
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".")
                base = base[:len(base) - node.level + (1 if is_package else 0)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            if mod.split(".")[0] != "sosext":
                continue
            for alias in node.names:
                sub = f"{mod}.{alias.name}"
                found.add(sub if _exists(sub) else mod)
    return found


def _exists(dotted: str) -> bool:
    p = PACKAGE.parent.joinpath(*dotted.split("."))
    return p.with_suffix(".py").exists() or (p / "__init__.py").exists()


def all_modules() -> dict[str, set[str]]:
    return {module_name(p): imports_of(p) for p in sorted(PACKAGE.rglob("*.py"))}


def part(dotted: str) -> str:
    bits = dotted.split(".")
    return bits[1] if len(bits) > 1 else "__init__"


def test_every_module_has_a_layer() -> None:
    assert sorted({part(m) for m in all_modules()} - set(RANKS)) == []


def rank(dotted: str) -> float:
    return RANKS[part(dotted)]


def test_imports_point_down() -> None:
    wrong = []
    for mod, deps in all_modules().items():
        for dep in deps:
            if rank(dep) > rank(mod):
                wrong.append(f"{mod} imports {dep}")
    assert wrong == []


def test_commands_render_hosts_do_not_import_the_dac() -> None:
    wrong = [f"{mod} imports {dep}" for mod, deps in all_modules().items() if part(mod) in NO_DAC
             for dep in deps if part(dep) == "dac"]
    assert wrong == []


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n: str) -> list[str] | None:
        state[n] = 1
        stack.append(n)
        for d in sorted(graph.get(n, ())):
            if state.get(d) == 1:
                return stack[stack.index(d):] + [d]
            if d not in state:
                found = visit(d)
                if found:
                    return found
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(graph):
        if n not in state:
            found = visit(n)
            if found:
                return found
    return None


def test_no_import_cycle_in_the_model() -> None:
    mods = all_modules()
    graph = {m: {d for d in deps if part(d) == "clr" and d != m} for m, deps in mods.items() if part(m) == "clr"}
    # A package's __init__ re-exporting its modules is not a cycle of ideas: keep only module → module.
    assert _cycle(graph) is None, " → ".join(_cycle(graph) or [])


def test_the_checker_sees_a_cycle_and_an_upward_import() -> None:
    # The checks above must be able to fail.
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None
    assert part("sosext.commands.heap") == "commands" and RANKS["commands"] > RANKS["dac"]


@pytest.mark.parametrize("mod", ["sosext.commands.objects", "sosext.commands.config", "sosext.cli"])
def test_known_former_offenders_are_parsed(mod: str) -> None:
    # These once imported sosext.dac; they must still be in the scan, not skipped by a path slip.
    assert mod in all_modules()


def test_commands_render_hosts_do_not_reach_the_dac_through_the_model() -> None:
    # `rt.reader.object_data(...)` (formerly `rt.dac`) needs no import of sosext.dac but is the
    # same leak: what a command needs of a runtime reader is a ClrRuntime method in the runtime's words.
    wrong = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if part(module_name(path)) not in NO_DAC:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (isinstance(node, ast.Attribute) and node.attr in ("dac", "reader")
                    and not (isinstance(node.value, ast.Name) and node.value.id == "args")):  # --reader
                wrong.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}")
    assert wrong == []


def test_the_model_calls_no_private_helper_of_another_object() -> None:
    # A piece that calls heap._something is tied to the façade's insides (graph.py once used
    # heap._scratch): what a piece needs is public and named in clr/parts.py.
    wrong = []
    for path in sorted((PACKAGE / "clr").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")
                    and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls", "os"))):
                wrong.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno} {ast.unparse(node)}")
    assert wrong == []


def test_the_contracts_reader_loads_no_native_code() -> None:
    # contracts/ reads cores of any architecture and untrusted runtimes: no ctypes, no dac/.
    wrong = []
    for path in sorted((PACKAGE / "contracts").rglob("*.py")):
        for mod in imports_of(path) | {a for a in _plain_imports(path)}:
            if mod.split(".")[0] == "ctypes" or mod.startswith("sosext.dac"):
                wrong.append(f"{path.relative_to(PACKAGE.parent)}: {mod}")
    assert (PACKAGE / "contracts").is_dir() and wrong == []


def _plain_imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names.add(node.module)
    return names
