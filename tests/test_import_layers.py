"""The package's imports form layers: no module imports one of a higher
layer, and no import cycle exists, counting imports inside functions too
(a lazy import is still a dependency, just a later one)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import pytest_fsdpcheck

pytestmark = pytest.mark.unit

PACKAGE = Path(pytest_fsdpcheck.__file__).resolve().parent
CONFORMANCE = PACKAGE.parent / "conformance"

# Lowest first. A module may import its own layer's modules and any lower
# layer's; the longest prefix that matches a module's dotted name decides its layer.
# Each layer is a folder of the package (DESIGN.md's package map); the only
# modules left at the top are what users import by name: the implementation
# contract, the plugin's entry point, strategies and the distributed entry point.
LAYERS = [
    # what every part shares: IDs, the known-bug type, profiles, the run state
    # found by code that holds no pytest config; and the implementation contract
    ("shared", ["core", "contract"]),
    ("specification and generators", ["reference", "generators"]),
    ("checkers", ["checks"]),
    # the implementations, torch's adapter with the known bugs it declares
    ("implementations", ["impls"]),
    # judging failures against known bugs, and the divergences between implementations
    ("known bugs and divergences", ["known"]),
    # what runs implementations: the distributed checks' ranks, users' cases,
    # a model's known-bug exposure
    ("runners", ["runs", "cases"]),
    # the report's content and formats (JSON, HTML, JUnit): no pytest, no torch
    ("report", ["report"]),
    # the command-line tools: known bugs, history, mutation testing of torch's code;
    # `python -m pytest_fsdpcheck.known` forwards to commands.known
    ("commands", ["commands", "mutation", "known.__main__"]),
    # everything that runs only inside pytest, and its public entry points
    ("plugin", ["plugin", "distributed", "strategies", "conformance", "fixtures"]),
]

# The folders are the layers: every subpackage of pytest_fsdpcheck sits in
# one layer whole (known.__main__, the documented `python -m` name, excepted).
FOLDERS = {"core": "shared", "reference": "specification and generators",
           "generators": "specification and generators", "checks": "checkers",
           "impls": "implementations", "known": "known bugs and divergences",
           "runs": "runners", "cases": "runners", "report": "report",
           "commands": "commands", "mutation": "commands", "plugin": "plugin"}
TOP_LEVEL = {"contract", "distributed", "strategies"}


def _modules() -> dict[str, Path]:
    found = {}
    for root, prefix in ((PACKAGE, ""), (CONFORMANCE, "conformance.")):
        for path in root.rglob("*.py"):
            if "reproducers" in path.parts:  # scripts, not modules
                continue
            rel = path.relative_to(root).with_suffix("")
            parts = list(rel.parts)
            if parts[-1] == "__init__":
                parts.pop()
            name = prefix + ".".join(parts)
            found[name.rstrip(".") or "__init__"] = path
    return found


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """Package modules that ``name`` imports (and the packages they run first)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    if name.startswith("conformance"):
        package = "conformance"
    targets = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".") if package else []
                base = base[: len(base) - (node.level - 1)] if node.level > 1 else base
                mod = ".".join([*base, *(node.module.split(".") if node.module else [])])
            elif node.module and node.module.startswith("pytest_fsdpcheck"):
                mod = node.module[len("pytest_fsdpcheck"):].lstrip(".")
            else:
                continue
            candidates = [mod] + [f"{mod}.{a.name}" if mod else a.name for a in node.names]
        elif isinstance(node, ast.Import):
            candidates = [a.name[len("pytest_fsdpcheck"):].lstrip(".") for a in node.names
                          if a.name.startswith("pytest_fsdpcheck")]
        else:
            continue
        for cand in candidates:
            cand = cand.replace("conformance.", "conformance.", 1)
            while cand and cand not in known:
                cand = cand.rpartition(".")[0]
            # importing a.b.c runs a and a.b first, unless they are the
            # importer's own packages (already running)
            # `from . import sibling` names the importer's own package, which
            # is already running: only the sibling is imported (a name of the
            # package's own __init__ still counts, trimmed to the package below)
            if isinstance(node, ast.ImportFrom) and cand == mod == package and node.names[0].name != "*" and all(
                    f"{package}.{a.name}" in known for a in node.names) and name.startswith(package + "."):
                continue
            parts = cand.split(".") if cand else []
            for k in range(1, len(parts) + 1):
                target = ".".join(parts[:k])
                if k == len(parts) or not (name == target or name.startswith(target + ".")):
                    targets.add(target)
    targets.discard(name)
    return targets


def _layer(name: str) -> int:
    matches = [(len(prefix), index) for index, (_, prefixes) in enumerate(LAYERS) for prefix in prefixes
               if name == prefix or name.startswith(prefix + ".")]
    assert matches, f"module {name} is in no layer of tests/test_import_layers.py: add it"
    return max(matches)[1]


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    modules.pop("__init__", None)
    known = set(modules)
    return {name: _imports(name, path, known) for name, path in modules.items()}


def test_every_module_has_a_layer():
    for name in _graph():
        _layer(name)


def test_folders_are_the_layers():
    """Every module lives in its layer's folder; the top level holds only the
    public names users import, and no folder spans two layers."""
    names = {name: _layer(name) for name in _graph() if not name.startswith("conformance")}
    top = {name for name in names if "." not in name and name not in FOLDERS}
    assert top == TOP_LEVEL, f"top-level modules outside the layer folders: {sorted(top - TOP_LEVEL)}"
    folders = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    assert folders == set(FOLDERS), f"package folders not in FOLDERS: {sorted(folders ^ set(FOLDERS))}"
    misplaced = [f"{name} is in layer {LAYERS[layer][0]!r}, its folder in {FOLDERS[name.split('.')[0]]!r}"
                 for name, layer in sorted(names.items())
                 if name.split(".")[0] in FOLDERS and name != "known.__main__"
                 and LAYERS[layer][0] != FOLDERS[name.split(".")[0]]]
    assert not misplaced, "\n".join(misplaced)


def test_no_upward_imports():
    upward = [
        f"{name} ({LAYERS[_layer(name)][0]}) imports {dep} ({LAYERS[_layer(dep)][0]})"
        for name, deps in sorted(_graph().items())
        for dep in sorted(deps)
        if _layer(dep) > _layer(name)
    ]
    assert not upward, "imports from a lower layer up:\n" + "\n".join(upward)


def test_no_import_cycles():
    graph = _graph()
    cycles, state, stack = [], {}, []

    def visit(start):
        # iterative DFS: the graph is small, but recursion is not the repo's habit
        work = [(start, iter(sorted(graph[start])))]
        state[start] = "open"
        stack.append(start)
        while work:
            node, deps = work[-1]
            dep = next(deps, None)
            if dep is None:
                work.pop()
                stack.pop()
                state[node] = "done"
            elif state.get(dep) == "open":
                cycles.append(stack[stack.index(dep):] + [dep])
            elif dep not in state and dep in graph:
                state[dep] = "open"
                stack.append(dep)
                work.append((dep, iter(sorted(graph[dep]))))

    for name in sorted(graph):
        if name not in state:
            visit(name)
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_the_walk_sees_a_planted_cycle(tmp_path):
    # the checks above are only worth something if the walk finds imports
    graph = _graph()
    assert "plugin.collection" in graph["plugin"] or "report" in graph["plugin"]
    assert any("impls" in deps for deps in graph.values())


def _imports_of_pytest_or_torch(path: Path) -> list[str]:
    banned = ("pytest", "_pytest", "pluggy", "torch")
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                 else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
        found += [f"{path.name}:{node.lineno} imports {n}" for n in names if n.split(".")[0] in banned]
    return found


def test_the_report_imports_neither_pytest_nor_torch(tmp_path):
    """report/ draws the run's content (JSON, HTML, JUnit, the terminal's text)
    from what it is handed: it imports no pytest and no torch, at any depth of
    a function, so the history tool and a reader of saved reports need neither
    (what it imports of the package is the layers' test above)."""
    found = [hit for path in sorted((PACKAGE / "report").rglob("*.py")) for hit in _imports_of_pytest_or_torch(path)]
    assert not found, "\n".join(found)
    # the walk finds a lazy import inside a function
    planted = tmp_path / "planted.py"
    planted.write_text("import json\n\n\ndef page():\n    from torch.nn import Module\n    import _pytest.nodes\n")
    assert _imports_of_pytest_or_torch(planted) == ["planted.py:5 imports torch.nn", "planted.py:6 imports _pytest.nodes"]


def _plugin_imports(graph: dict[str, set[str]]) -> list[str]:
    return sorted(f"{name} imports {target}" for name, targets in graph.items() if name.startswith("conformance")
                  for target in targets if target.split(".")[0] in ("plugin", "report"))


def test_the_suite_asks_the_run_through_its_fixture():
    """The conformance suite is the plugin's client: what it needs of the run
    (seed, world sizes, limits, an ERROR or a case error of its own) comes
    from the ``fsdpcheck_run`` fixture, never from the plugin's modules or
    the report's property keys, which can then change without the suite."""
    assert not _plugin_imports(_graph())
    planted = {"conformance.test_x": {"plugin.session", "checks"}, "plugin": {"report.verdict"}}
    assert _plugin_imports(planted) == ["conformance.test_x imports plugin.session"]
