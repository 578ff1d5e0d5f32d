"""The package's import graph: no circles, and no module reaching into another's private names.

Read from the source with :mod:`ast` (every import, top-level or inside a function or an
``if TYPE_CHECKING:`` block), so the check does not depend on what happens to be imported at run time.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "firsttoken"


@dataclass
class Module:
    name: str
    path: Path
    is_package: bool
    tree: ast.Module
    imports: set[str] = field(default_factory=set)
    """The package's modules this one imports."""


def _modules(root: Path) -> dict[str, Module]:
    mods = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root.parent).with_suffix("").parts
        is_package = parts[-1] == "__init__"
        name = ".".join(parts[:-1] if is_package else parts)
        mods[name] = Module(name, path, is_package, ast.parse(path.read_text(), str(path)))
    return mods


def _absolute(mod: Module, level: int, name: str | None) -> str:
    if level == 0:
        return name or ""
    base = mod.name.split(".") if mod.is_package else mod.name.split(".")[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join([*base, name] if name else base)


def _owner(mods: dict[str, Module], dotted: str) -> str | None:
    """The package module ``dotted`` is, or lives in."""
    while dotted and dotted not in mods:
        dotted = dotted.rpartition(".")[0]
    return dotted or None


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _graph(mods: dict[str, Module]) -> list[str]:
    """Fill in every module's imports; returns the private names used across modules."""
    problems = []
    for mod in mods.values():
        aliases: dict[str, str] = {}  # local name -> package module it is bound to
        for node in ast.walk(mod.tree):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                for alias in node.names:
                    targets.append(alias.name)
                    if alias.asname and alias.name in mods:
                        aliases[alias.asname] = alias.name
            elif isinstance(node, ast.ImportFrom):
                base = _absolute(mod, node.level, node.module)
                for alias in node.names:
                    full = f"{base}.{alias.name}"
                    if full in mods:  # a submodule (private modules are the package's own business)
                        targets.append(full)
                        aliases[alias.asname or alias.name] = full
                        continue
                    targets.append(base)
                    owner = _owner(mods, base)
                    if owner is not None and owner != mod.name and _is_private(alias.name):
                        problems.append(f"{mod.name} imports {owner}.{alias.name}")
            for target in targets:
                owner = _owner(mods, target)
                # A module importing its own package's __init__ (e.g. for __version__) is no circle.
                if owner is not None and owner != mod.name and not mod.name.startswith(owner + "."):
                    mod.imports.add(owner)
        for node in ast.walk(mod.tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in aliases
                and _is_private(node.attr)
                and f"{aliases[node.value.id]}.{node.attr}" not in mods
            ):
                problems.append(f"{mod.name} uses {aliases[node.value.id]}.{node.attr} (line {node.lineno})")
    return problems


def _circles(mods: dict[str, Module]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for start in mods:
        if start in index:
            continue
        work = [(start, iter(sorted(mods[start].imports)))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(mods[child].imports))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def _describe(mods: dict[str, Module], circle: list[str]) -> str:
    edges = [f"{a} -> {b}" for a in circle for b in sorted(mods[a].imports & set(circle))]
    return "circle: " + "; ".join(edges)


@pytest.fixture(scope="module")
def package() -> tuple[dict[str, Module], list[str]]:
    mods = _modules(PACKAGE)
    return mods, _graph(mods)


def test_no_import_circles(package: tuple[dict[str, Module], list[str]]) -> None:
    mods, _ = package
    assert len(mods) > 20, "the package's modules were found"
    circles = _circles(mods)
    assert not circles, "\n".join(_describe(mods, c) for c in circles)


def test_no_module_uses_another_modules_private_names(package: tuple[dict[str, Module], list[str]]) -> None:
    _, problems = package
    assert not problems, "\n".join(problems)


# The layers of docs/design.md, lowest first: a module imports only modules of its own layer or below.
LAYERS: tuple[tuple[str, ...], ...] = (
    # the simulator stands alone; the foundations name things and hold no state of a call
    ("sim", "_internal", "_imports", "_version", "_sums", "semconv", "_targets", "targets", "config"),
    ("timeline",),
    ("context",),
    ("tail", "instruments", "actions", "recorder", "_patch", "_otlp"),  # spans and metrics: the app's, a call's
    ("streams",),
    (
        "headers",
        "transport",
        "transport_aiohttp",
        "transport_requests",
        "transport_botocore",
        "transport_aiobotocore",
    ),  # the HTTP client adapters, the header table
    ("providers",),  # wire formats, the call lifecycle, the SDK hooks, the wire path
    ("_install", "_exit", "_coexist", "instrumentor", "app", "race"),  # the instrumentation and what the app calls
    ("charts",),  # what the reports and the viewer draw with
    ("view",),  # the viewer: the command line starts it, it reaches up into nothing
    ("stack",),  # the stack files derived from prometheus/slos.yml (firsttoken stack)
    ("firsttoken", "__main__", "cli"),  # the public API, the command line
)


def _layer(name: str) -> int:
    """The layer of module ``firsttoken.x.y``: that of its longest listed prefix."""
    parts = name.split(".")[1:] or ["firsttoken"]
    for n in range(len(parts), 0, -1):
        prefix = ".".join(parts[:n])
        for index, members in enumerate(LAYERS):
            if prefix in members:
                return index
    raise AssertionError(f"{name} is in no layer of tests/test_imports.py LAYERS (nor docs/design.md)")


def test_imports_go_down_the_layers(package: tuple[dict[str, Module], list[str]]) -> None:
    """The layer order docs/design.md states: no module imports one of a higher layer."""
    mods, _ = package
    upward = [
        f"{name} (layer {_layer(name)}) imports {target} (layer {_layer(target)})"
        for name, mod in mods.items()
        for target in sorted(mod.imports)
        if _layer(target) > _layer(name)
    ]
    assert upward == []


def test_the_layers_are_the_ones_docs_design_states() -> None:
    text = (PACKAGE.parents[1] / "docs" / "design.md").read_text()
    for members in LAYERS:
        for member in members:
            shown = "firsttoken/__init__.py" if member == "firsttoken" else member
            assert f"`{shown}" in text, f"docs/design.md does not place {member}"


def _write(root: Path, files: dict[str, str]) -> dict[str, Module]:
    for name, text in files.items():
        path = root / "pkg" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    mods = _modules(root / "pkg")
    return mods


def test_the_checks_find_what_they_look_for(tmp_path: Path) -> None:
    """The checks above would fail on a circle through a function-level import and on private names."""
    mods = _write(
        tmp_path,
        {
            "__init__.py": "from .a import thing\n",
            "a.py": "from . import b\nthing = 1\n",
            "b.py": "def late():\n    from .sub import c\n",
            "sub/__init__.py": "",
            "sub/c.py": "from .. import a as mod_a\nfrom ..b import _hidden\nx = mod_a._secret\nfrom . import _own\n",
            "sub/_own.py": "import pkg.a\n",
        },
    )
    problems = _graph(mods)
    assert sorted(problems) == ["pkg.sub.c imports pkg.b._hidden", "pkg.sub.c uses pkg.a._secret (line 3)"]
    assert _circles(mods) == [["pkg.a", "pkg.b", "pkg.sub._own", "pkg.sub.c"]]
    assert mods["pkg.sub._own"].imports == {"pkg.a"}
    assert "pkg" not in mods["pkg.a"].imports, "a package's own __init__ is not a circle"


def test_matches_the_shared_checker_when_present() -> None:
    """CI has ../shared beside the clone; the project's own check must agree with the shared tool."""
    import subprocess
    import sys

    tool = PACKAGE.parents[2] / "shared" / "tools" / "import_cycles.py"
    if not tool.exists():
        pytest.skip(f"{tool} is not on this machine; the ast check above stands alone")
    result = subprocess.run([sys.executable, str(tool), str(PACKAGE)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
