"""The import graph of the project's packages: ``python -m mnp.tools.docgen.depgraph [--mermaid]``.

Reads every module of ``mnp``, ``datamodules`` and ``baselines`` with :mod:`ast` (nothing is imported),
counts every import of a project module (also those inside functions), and prints the package-level
edges, each with the modules behind it, then any import cycle between modules. Exit status 1 when a
cycle exists; ``tests/test_architecture.py`` holds the project to none.
"""

from __future__ import annotations

import argparse
import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
PACKAGES = ("mnp", "datamodules", "baselines")


def modules(root: Path = ROOT) -> dict[str, Path]:
    found = {}
    for pkg in PACKAGES:
        for path in sorted((root / pkg).rglob("*.py")):
            name = ".".join(path.relative_to(root).with_suffix("").parts)
            found[name.removesuffix(".__init__")] = path
    return found


def edges(mods: dict[str, Path]) -> dict[str, set[str]]:
    """module -> the project modules it imports."""
    out: dict[str, set[str]] = {m: set() for m in mods}
    for name, path in mods.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            else:
                continue
            out[name] |= {t for t in targets if t in mods and t != name}
    return out


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def package_of(module: str, mods: dict[str, Path]) -> str:
    """The (sub)package that holds ``module``: ``mnp.framework`` for mnp.framework.routine, ``mnp.model`` for mnp.model."""
    return module if mods[module].name == "__init__.py" else module.rpartition(".")[0]


def package_edges(graph: dict[str, set[str]], mods: dict[str, Path]) -> dict[tuple[str, str], set[str]]:
    """(package, package) -> the module imports behind the edge; subpackages are packages of their own."""
    out: dict[tuple[str, str], set[str]] = defaultdict(set)
    for m, targets in graph.items():
        for t in targets:
            a, b = package_of(m, mods), package_of(t, mods)
            if a != b:
                out[(a, b)].add(f"{m} -> {t}")
    return dict(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="The project's import graph and its cycles.")
    ap.add_argument("--mermaid", action="store_true", help="print the package graph as a mermaid block")
    args = ap.parse_args(argv)
    mods = modules()
    graph = edges(mods)
    pkg = package_edges(graph, mods)
    if args.mermaid:
        print("```mermaid\ngraph LR")
        for (a, b), why in sorted(pkg.items()):
            print(f"  {a} -->|{len(why)}| {b}")
        print("```")
    else:
        for (a, b), why in sorted(pkg.items()):
            print(f"{a} -> {b}: " + ", ".join(sorted(why)))
    found = cycles(graph)
    for c in found:
        print("cycle: " + " -> ".join(c))
    print(f"{len(graph)} modules, {sum(map(len, graph.values()))} imports, {len(found)} cycles")
    return 1 if found else 0


if __name__ == "__main__":
    raise SystemExit(main())
