"""The lines of a file that an area's mutants may change: the seed
definitions and, transitively, every definition of the same file they call
or reference (a module-level function or class by name, a method of the
same class through ``self``/``cls``; a class only where it is
instantiated)."""

from __future__ import annotations

import ast


def _definitions(tree: ast.Module) -> dict[str, ast.AST]:
    """Top-level functions and classes by name, methods as ``Class.method``."""
    found: dict[str, ast.AST] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found[node.name] = node
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    found[f"{node.name}.{item.name}"] = item
    return found


def _referenced(node: ast.AST, owner: str | None, defined: dict[str, ast.AST]) -> set[str]:
    names = set()
    # a class joins only where it is instantiated: an isinstance test or a
    # type hint naming it runs none of its code
    called = {id(sub.func) for sub in ast.walk(node) if isinstance(sub, ast.Call)}
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name) and sub.id in defined:
            if not isinstance(defined[sub.id], ast.ClassDef) or id(sub) in called:
                names.add(sub.id)
        elif (isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name)
              and sub.value.id in ("self", "cls") and owner and f"{owner}.{sub.attr}" in defined):
            names.add(f"{owner}.{sub.attr}")
    return names


def scope(source: str, seeds: tuple[str, ...]) -> dict[str, tuple[int, int]]:
    """``{definition: (first line, last line)}`` for the seeds and what they
    reach; decorators included. A seed the file lacks raises ``KeyError``."""
    tree = ast.parse(source)
    defined = _definitions(tree)
    missing = [seed for seed in seeds if seed not in defined]
    if missing:
        raise KeyError(", ".join(missing))
    reached, todo = {}, list(seeds)
    while todo:
        name = todo.pop()
        if name in reached:
            continue
        node = defined[name]
        first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
        reached[name] = (first, node.end_lineno)
        owner = name if isinstance(node, ast.ClassDef) else (name.split(".")[0] if "." in name else None)
        todo.extend(_referenced(node, owner, defined) - reached.keys())
    return reached


def inside(line: int, ranges) -> bool:
    return any(first <= line <= last for first, last in ranges)


def unevaluated_annotations(source: str) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """The spans ((line, col), (end line, end col)) of local variables'
    annotations: Python never evaluates them (PEP 526), so no edit inside one
    changes what the code does. A class body's and the module's are evaluated."""
    spans = []
    todo = [(node, False) for node in ast.parse(source).body]
    while todo:
        node, in_function = todo.pop()
        if isinstance(node, ast.AnnAssign) and in_function:
            ann = node.annotation
            spans.append(((ann.lineno, ann.col_offset), (ann.end_lineno, ann.end_col_offset)))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            inner = True
        elif isinstance(node, ast.ClassDef):
            inner = False
        else:
            inner = in_function
        todo.extend((child, inner) for child in ast.iter_child_nodes(node))
    return spans


def within(position: tuple[int, int], spans) -> bool:
    return any(first <= tuple(position) < last for first, last in spans)
