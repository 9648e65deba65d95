"""The package layering of DESIGN.md ("Packages"), checked on the source (ast: nothing is imported).

* ``iro_fed`` (the library) imports neither ``edge_agent`` (the daemon) nor ``benchmarks``;
* ``iro_fed`` reaches ``solvers`` only through the package itself (``solvers.make``,
  ``solvers.available`` and the rest of ``solvers.__all__``), never a submodule (neither imported
  nor as ``solvers.base.X``), except the known deviations listed in :data:`KNOWN_SOLVERS_INTERNALS`;
  and ``import solvers`` itself (run in a fresh interpreter, the one check that imports) loads no
  optional dependency while every name of its ``__all__`` resolves;
* ``solvers`` imports neither ``edge_agent``, ``benchmarks`` nor an ``iro_fed`` integration;
* the core modules (``iro_fed.model``, ``objective``, ``feasibility``) load no optional dependency
  when imported: no module-level import of one in them, nor in any project module they load.

Every top-level module of ``iro_fed`` must be classified below, so that a new one is a decision.
"""

from __future__ import annotations

import ast
import functools
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PROJECT = ("iro_fed", "solvers", "edge_agent")

#: DESIGN.md: what ``solvers`` may import of ``iro_fed``.
CORE = {"iro_fed.model", "iro_fed.objective", "iro_fed.feasibility"}
#: Domain helpers beside the core, imported by solvers too (data formats, features, bounds).
DOMAIN = {
    "iro_fed.experience", "iro_fed.features", "iro_fed.fragmentation", "iro_fed.interrupt", "iro_fed.limits", "iro_fed.packing",
    "iro_fed.placement", "iro_fed.problem_io", "iro_fed.traces",
}
#: Integrations and entry points (most of them import ``solvers``): never imported by ``solvers``.
INTEGRATIONS = {
    "iro_fed.cli", "iro_fed.federated", "iro_fed.feedback", "iro_fed.k8s", "iro_fed.learning", "iro_fed.metrics",
    "iro_fed.plots", "iro_fed.replay", "iro_fed.signal_event", "iro_fed.sim", "iro_fed.testing",
}

#: The pip extras' packages (pyproject.toml), by import name.
OPTIONAL = {
    "codecarbon", "cryptography", "dimod", "dwave", "flwr", "gymnasium", "kubernetes", "matplotlib", "ortools",
    "prometheus_client", "psutil", "torch",
}

#: KNOWN DEVIATION from DESIGN.md ("iro_fed may import solvers only through the package"): these
#: iro_fed modules import these solvers submodules. Listed one by one so that any new one fails here;
#: what an integration needs belongs in ``solvers.__all__`` instead (the DQN's config, checkpoint and
#: training entry points, MAX_SEED, parse_setting are there).
KNOWN_SOLVERS_INTERNALS: frozenset[tuple[str, str]] = frozenset({
})


@dataclass(frozen=True)
class Import:
    """One imported name: ``module`` the deepest project module it names (or the dotted name, for
    other packages), ``name`` the full dotted name, where it is, and whether it runs at import time."""

    importer: str
    name: str
    module: str
    line: int
    module_level: bool


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _sources(package: str) -> dict[str, Path]:
    return {_module_name(p): p for p in sorted((ROOT / package).rglob("*.py")) if ".venv" not in p.parts}


MODULES: dict[str, Path] = {name: path for pkg in PROJECT for name, path in _sources(pkg).items()}
PACKAGES: set[str] = {name for name, path in MODULES.items() if path.name == "__init__.py"} | {
    # namespace packages (a folder of modules without __init__.py, e.g. iro_fed/federated)
    name.rsplit(".", 1)[0] for name in MODULES if "." in name
}


def _deepest_module(dotted: str) -> str:
    """The longest prefix of ``dotted`` that is a project module or package (``dotted`` itself for
    other packages)."""
    parts = dotted.split(".")
    for end in range(len(parts), 0, -1):
        prefix = ".".join(parts[:end])
        if prefix in MODULES or prefix in PACKAGES:
            return prefix
    return dotted


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _walk(node: ast.AST, in_function: bool) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
    """Every import statement under ``node`` and whether it runs at import time (not inside a
    function, not under ``if TYPE_CHECKING:``)."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.Import, ast.ImportFrom)):
            yield child, not in_function
        elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            yield from _walk(child, True)
        elif isinstance(child, ast.If) and _is_type_checking(child.test):
            for stmt in child.body:  # typing only: never runs
                yield from ((imp, False) for imp, _ in _walk(ast.Module(body=[stmt], type_ignores=[]), True))
            for stmt in child.orelse:
                yield from _walk(ast.Module(body=[stmt], type_ignores=[]), in_function)
        else:
            yield from _walk(child, in_function)


@functools.cache
def imports_of(module: str) -> tuple[Import, ...]:
    """The imports in ``module``'s source, at any depth."""
    path = MODULES[module]
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out = []
    for stmt, module_level in _walk(tree, False):
        if isinstance(stmt, ast.Import):
            names = [alias.name for alias in stmt.names]
        else:
            base = stmt.module or ""
            if stmt.level:  # relative: from the package, up level - 1
                anchor = package.split(".")[: len(package.split(".")) - (stmt.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            names = [base if alias.name == "*" else f"{base}.{alias.name}" for alias in stmt.names]
        out += [Import(module, name, _deepest_module(name), stmt.lineno, module_level) for name in names]
    return tuple(out)


def _top(name: str) -> str:
    return name.split(".")[0]


def _within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def _solvers_public() -> set[str]:
    """``solvers.__all__``, read from the source."""
    tree = ast.parse(MODULES["solvers"].read_text(encoding="utf-8"))
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in stmt.targets):
            return {ast.literal_eval(elt) for elt in stmt.value.elts}
    raise AssertionError("solvers/__init__.py has no __all__")


@functools.cache
def solvers_attributes(module: str) -> tuple[tuple[int, str], ...]:
    """``(line, name)`` of each ``solvers.name`` in ``module``'s source (``import solvers`` then
    ``solvers.base.MAX_SEED`` reaches a submodule without importing it)."""
    path = MODULES[module]
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    return tuple((node.lineno, node.attr) for node in ast.walk(tree)
                 if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "solvers")


def _where(imp: Import) -> str:
    return f"{MODULES[imp.importer].relative_to(ROOT)}:{imp.line}: {imp.name}"


# --- the rules ------------------------------------------------------------------------------------


def test_every_iro_fed_module_is_classified() -> None:
    top = {".".join(name.split(".")[:2]) for name in MODULES if _top(name) == "iro_fed" and name != "iro_fed"}
    classes = (CORE, DOMAIN, INTEGRATIONS)
    assert top - set().union(*classes) == set(), "classify the new module as core, domain or integration here"
    assert not (CORE & DOMAIN or CORE & INTEGRATIONS or DOMAIN & INTEGRATIONS)
    assert set().union(*classes) <= top, "a classified module no longer exists"


def test_iro_fed_imports_neither_the_daemon_nor_the_benchmarks() -> None:
    bad = [_where(i) for m in MODULES if _top(m) == "iro_fed" for i in imports_of(m)
           if _top(i.name) in ("edge_agent", "benchmarks")]
    assert bad == [], "the library (iro_fed) may not import the daemon or the benchmarks:\n" + "\n".join(bad)


def test_iro_fed_reaches_solvers_only_through_the_package() -> None:
    public = _solvers_public()
    assert {"make", "available"} <= public
    bad, used = [], set()
    for m in MODULES:
        if _top(m) != "iro_fed":
            continue
        for i in imports_of(m):
            if _top(i.name) != "solvers" or i.name == "solvers":
                continue
            if i.module == "solvers":  # from solvers import NAME: NAME must be public
                if i.name.split(".", 1)[1] not in public:
                    bad.append(_where(i) + " (not in solvers.__all__)")
            elif (m, i.module) in KNOWN_SOLVERS_INTERNALS:
                used.add((m, i.module))
            else:
                bad.append(_where(i) + f" (the submodule {i.module}: use solvers.__all__)")
        bad += [f"{MODULES[m].relative_to(ROOT)}:{line}: solvers.{name} (not in solvers.__all__)"
                for line, name in solvers_attributes(m) if name not in public]
    assert bad == [], "iro_fed imports solvers internals (DESIGN: only the package, solvers.__all__):\n" + "\n".join(bad)
    assert KNOWN_SOLVERS_INTERNALS - used == set(), "no longer imported: remove from KNOWN_SOLVERS_INTERNALS"


def test_import_solvers_loads_no_optional_dependency_and_its_api_resolves() -> None:
    # A fresh interpreter: this one may hold torch already. The DQN's names past its config are
    # looked up on use (solvers.__getattr__); the agent's needs torch, so it is resolved last.
    code = (
        "import importlib.util, sys\n"
        "import solvers\n"
        f"loaded = sorted(set({sorted(OPTIONAL)!r}) & {{m.split('.')[0] for m in sys.modules}})\n"
        "assert not loaded, f'import solvers loaded {loaded}'\n"
        "for name in solvers.__all__:\n"
        "    if name != 'DQNAgent' or importlib.util.find_spec('torch'):\n"
        "        assert getattr(solvers, name) is not None, name\n"
        "assert set(solvers.__all__) <= set(dir(solvers))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_solvers_import_no_integration() -> None:
    bad = []
    for m in MODULES:
        if _top(m) != "solvers":
            continue
        for i in imports_of(m):
            if _top(i.name) in ("edge_agent", "benchmarks") or any(_within(i.name, p) for p in INTEGRATIONS):
                bad.append(_where(i))
    assert bad == [], "solvers may import iro_fed's core and domain modules, never an integration:\n" + "\n".join(bad)


def _loaded_at_import(start: str) -> dict[str, list[str]]:
    """The project modules that importing ``start`` runs (module-level imports, followed; a module
    runs its parent packages' ``__init__`` first), each with the chain that reaches it."""
    chains: dict[str, list[str]] = {}
    todo = [(start, [start])]
    while todo:
        module, chain = todo.pop()
        if module in chains or module not in MODULES:
            continue
        chains[module] = chain
        parents = [".".join(module.split(".")[:n]) for n in range(1, module.count(".") + 1)]
        todo += [(p, [*chain, p]) for p in parents]
        todo += [(i.module, [*chain, i.module]) for i in imports_of(module) if i.module_level]
    return chains


@pytest.mark.parametrize("core", sorted(CORE))
def test_core_modules_load_no_optional_dependency(core: str) -> None:
    bad = []
    for module, chain in _loaded_at_import(core).items():
        for i in imports_of(module):
            if i.module_level and _top(i.name) in OPTIONAL:
                bad.append(_where(i) + f" (loaded by {' -> '.join(chain)})")
    assert bad == [], f"importing {core} loads an optional dependency:\n" + "\n".join(bad)


# --- the checker itself ---------------------------------------------------------------------------


def test_the_walk_tells_module_level_from_lazy_imports() -> None:
    tree = ast.parse(
        "import torch\n"
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    import flwr\nelse:\n    import dimod\n"
        "class A:\n    import ortools\n"
        "def f():\n    import kubernetes\n"
        "try:\n    import psutil\nexcept ImportError:\n    pass\n"
    )
    got = {alias.name: level for stmt, level in _walk(tree, False) for alias in stmt.names}
    assert got == {"torch": True, "TYPE_CHECKING": True, "flwr": False, "dimod": True, "ortools": True,
                   "kubernetes": False, "psutil": True}


def test_the_checker_sees_the_imports_it_must() -> None:
    # a relative import resolves, and lazy imports inside functions are found (task.py's were)
    task = imports_of("iro_fed.federated.task")
    assert any(i.name == "solvers.Transition" and i.module == "solvers" and not i.module_level for i in task)
    assert any(i.module == "iro_fed.learning" and i.module_level for i in task)
    assert "iro_fed" in _loaded_at_import("iro_fed.model")  # the package's __init__ runs first
