"""Import loops between the package's files, counting deferred (function-level) imports: the module import graph
built with `ast` (an edge for every `import`/`from ... import` anywhere in a file, except under `if TYPE_CHECKING:`,
which never runs), and its cycles, one per strongly connected component, shortest first.

    python benchmarks/import_cycles.py        # lists the loops; exit 1 if there is any
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import networkx as nx

PACKAGE = Path(__file__).resolve().parents[1] / "fairmedbench"


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _runtime_imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement in the file that can run (those under `if TYPE_CHECKING:` cannot)."""
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    return [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom)) and id(n) not in skip]


def import_graph(root: Path = PACKAGE) -> nx.DiGraph:
    """Module -> modules it imports (within the package): `from a import b` names a.b when b is a module."""
    files = {_module_name(p, root): p for p in sorted(root.rglob("*.py"))}
    graph = nx.DiGraph()
    graph.add_nodes_from(files)
    for name, path in files.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in _runtime_imports(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, *([base] if base else [])])
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in files else base for a in node.names]
            for target in targets:
                while target and target not in files:  # `import a.b.c` of a name inside a module
                    target = target.rpartition(".")[0]
                if target and target != name:
                    graph.add_edge(name, target)
    return graph


def import_cycles(root: Path = PACKAGE) -> list[list[str]]:
    """One shortest loop per strongly connected component of more than one module, sorted."""
    graph = import_graph(root)
    loops = []
    for component in nx.strongly_connected_components(graph):
        if len(component) > 1:
            sub = graph.subgraph(component)
            start = min(component)
            loops.append(min((nx.shortest_path(sub, nxt, start) for nxt in sub.successors(start)), key=len))
            loops[-1] = [start, *loops[-1]]
    return sorted(loops)


def main() -> int:
    graph, loops = import_graph(), import_cycles()
    print(f"{graph.number_of_nodes()} modules, {graph.number_of_edges()} import edges, "
          f"{sum(1 for _ in nx.simple_cycles(graph))} simple cycles in {len(loops)} loop(s)")
    for loop in loops:
        print("  " + " -> ".join(loop))
    return 1 if loops else 0


if __name__ == "__main__":
    sys.exit(main())
