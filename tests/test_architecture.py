"""The dependency rules of architecture.md, checked on the source: one-way imports between the
packages, no import cycle between any two modules, the client side of ``sdk`` free of the store
engine, and ``import sdk`` staying light.

The import graph is static: one node per module of localstore, offsetstore and sdk, one edge per
import statement naming another of them, at module level or inside a function (a lazy import
still ties the two modules together); imports under ``if TYPE_CHECKING:`` are not edges (they
never run). ``from X import Y`` is an edge to ``X`` and, when ``Y`` is a submodule, to ``X.Y``:
a module that takes a name from its own package's ``__init__`` while that ``__init__`` imports
it back is a cycle.

The client side of ``sdk`` is what an application that talks to a remote broker loads: every
``sdk`` module except the broker side (``sdk.broker.*``, the HTTP server ``sdk.server.*``, and
``sdk.transport.in_process``, the local-mode transport into an embedded broker's service) and
the tools (``sdk.cli.*``,
``sdk.perf.*``) and the Spark data source (``sdk.spark.*``: it opens store directories
read-only, and it alone imports pyspark). Today that is the ``sdk`` package itself,
``sdk.errors``, ``sdk.message``,
``sdk.outgoing``, ``sdk.producer``, ``sdk.transaction``, ``sdk.consumer.*`` (consumers, process
queue, rebalance, allocation), ``sdk.idempotency.*`` and ``sdk.transport`` (the seam, its models
and ``resolve``); a new ``sdk`` module is client-side unless it joins the broker side or the
tools. Of ``localstore`` a client may reach only the record format (``localstore.record.*``: it
decodes the stored bytes a pull returns with the store's own codec), directly or through any
module it imports.
"""

from __future__ import annotations

import ast
import importlib
import itertools
import subprocess
import sys
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pytest

import sdk

REPO = Path(__file__).resolve().parents[1]
STDLIB = sys.stdlib_module_names
PACKAGES = ("localstore", "offsetstore", "sdk")

# What each package may import besides the standard library and itself.
ALLOWED = {
    "quiver_errors": set(),
    "localstore": {"quiver_errors", "orjson", "filelock"},
    "offsetstore": {"quiver_errors", "orjson", "filelock", "tenacity"},
}


def imported_top_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


# Packages of the ``spark`` extra, and what they may import besides their package's allowance.
SPARK_EXTRA_PACKAGES = {"localstore/record/arrow/": {"numba", "numpy", "pyarrow"}}


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_package_imports_only_what_it_may(package: str):
    for path in sorted((REPO / package).rglob("*.py")):
        relative = path.relative_to(REPO).as_posix()
        extra = set().union(*(v for k, v in SPARK_EXTRA_PACKAGES.items() if relative.startswith(k)))
        allowed = ALLOWED[package] | extra | {package, "__future__"}
        foreign = {m for m in imported_top_modules(path) if m not in STDLIB and m not in allowed}
        assert not foreign, f"{path.relative_to(REPO)} imports {sorted(foreign)}"


def imported_names(source: str, module: str) -> set[str]:
    """Every module name ``source`` (the text of module ``module``) imports, relative imports
    resolved, anywhere in the file (a lazy import inside a function counts); for ``from X
    import Y`` both ``X`` and ``X.Y`` (Y may be a submodule)."""
    package = module.split(".")[:-1]  # the package a relative import starts from
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base_parts = package[: len(package) - node.level + 1] if node.level else []
            base = ".".join([*base_parts, *([node.module] if node.module else [])])
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def _imports_the_cli(names: set[str]) -> bool:
    return any(name == "sdk.cli" or name.startswith("sdk.cli.") for name in names)


def test_the_import_check_sees_every_form_of_importing_the_cli():
    forms = [
        "import sdk.cli",
        "from sdk.cli import main",
        "from sdk import cli",
        "from . import cli",
        "def later():\n    from .cli import main",
    ]
    for form in forms:
        assert _imports_the_cli(imported_names(form, "sdk.producer")), form
    assert _imports_the_cli(imported_names("from ..cli import main", "sdk.perf.report"))
    assert not _imports_the_cli(imported_names("from . import client", "sdk.producer"))
    assert not _imports_the_cli(imported_names("from .perf import cli", "sdk.producer"))


def test_nothing_imports_the_cli():
    for package in ("localstore", "offsetstore", "sdk"):
        for path in sorted((REPO / package).rglob("*.py")):
            relative = path.relative_to(REPO)
            if relative.parts[:2] == ("sdk", "cli"):
                continue
            module = ".".join(relative.with_suffix("").parts)
            names = imported_names(path.read_text(), module)
            assert not _imports_the_cli(names), f"{relative} imports the CLI"


def test_only_the_spark_data_source_imports_pyspark():
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            relative = path.relative_to(REPO)
            if relative.parts[:2] == ("sdk", "spark"):
                continue
            assert "pyspark" not in imported_top_modules(path), f"{relative} imports pyspark"


def test_importing_sdk_stays_light():
    code = (
        "import sys, sdk, localstore, offsetstore; "
        "heavy = [m for m in ('aiohttp.web', 'pyspark', 'pyarrow', 'numpy', 'sdk.cli', "
        "'sdk.cli.main', 'localstore.record.arrow') "
        "if m in sys.modules]; print(heavy)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "[]"


# --- the import graph ------------------------------------------------------------------------

Graph = Mapping[str, Mapping[str, int]]  # module -> {imported module: line of the import}


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _run_time_nodes(node: ast.AST) -> Iterator[ast.AST]:
    """Every node under ``node`` except the bodies of ``if TYPE_CHECKING:`` (their ``else``
    runs, so it is kept)."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _is_type_checking(child.test):
            for orelse in child.orelse:
                yield orelse
                yield from _run_time_nodes(orelse)
            continue
        yield child
        yield from _run_time_nodes(child)


def run_time_imports(source: str, package: str) -> Iterator[tuple[str, int]]:
    """``(module name, line)`` for every import ``source`` runs, anywhere in the file (inside
    functions too), relative imports resolved from ``package`` (the package the module is in,
    or the package itself for an ``__init__``); ``from X import Y`` names ``X`` and ``X.Y``."""
    parts = package.split(".") if package else []
    for node in _run_time_nodes(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            start = parts[: len(parts) - node.level + 1] if node.level else []
            base = ".".join([*start, *([node.module] if node.module else [])])
            yield base, node.lineno
            for alias in node.names:
                yield f"{base}.{alias.name}", node.lineno


def project_modules(root: Path = REPO) -> dict[str, Path]:
    """Module name -> source file, for every module of the three packages under ``root``."""
    modules = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            modules[name] = path
    return modules


def import_graph(sources: Mapping[str, tuple[str, bool]]) -> dict[str, dict[str, int]]:
    """The graph of ``sources`` (module name -> (source text, is a package ``__init__``)):
    edges only to modules among them, none from a module to itself."""
    graph: dict[str, dict[str, int]] = {}
    for module, (source, is_package) in sources.items():
        package = module if is_package else module.rpartition(".")[0]
        edges = graph[module] = {}
        for name, line in run_time_imports(source, package):
            if name in sources and name != module:
                edges.setdefault(name, line)
    return graph


def project_graph() -> dict[str, dict[str, int]]:
    return import_graph(
        {
            name: (path.read_text(), path.name == "__init__.py")
            for name, path in project_modules().items()
        }
    )


def strongly_connected(graph: Graph) -> list[list[str]]:
    """The groups of two or more modules that import each other, directly or not (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for imported in graph[module]:
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in on_stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == module:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return sorted(groups)


def shortest_path(graph: Graph, start: str, is_goal: Callable[[str], bool]) -> list[str] | None:
    """The shortest import chain from ``start`` to a module ``is_goal`` accepts (``start``
    itself only at the end of a chain: a cycle), or None when there is none."""
    parents: dict[str, str | None] = {start: None}
    queue = deque([start])
    while queue:
        module = queue.popleft()
        for imported in sorted(graph[module]):
            if is_goal(imported):
                chain = [imported, module]
                while parents[chain[-1]] is not None:
                    chain.append(parents[chain[-1]])  # type: ignore[arg-type]
                return chain[::-1]
            if imported not in parents:
                parents[imported] = module
                queue.append(imported)
    return None


def describe_chain(graph: Graph, chain: list[str]) -> str:
    """``a (line 3) -> b (line 9) -> c``: each arrow with the line of its import."""
    steps = [
        f"{module} (line {graph[module][after]})" for module, after in itertools.pairwise(chain)
    ]
    return " -> ".join([*steps, chain[-1]])


def cycle_messages(graph: Graph) -> list[str]:
    return [
        f"import cycle among {', '.join(group)}: "
        + describe_chain(graph, shortest_path(graph, group[0], group[0].__eq__) or group)
        for group in strongly_connected(graph)
    ]


def test_the_graph_sees_function_imports_and_relative_ones_but_not_type_checking_ones():
    sources = {
        "pkg": ("from pkg.a import A\n", True),
        "pkg.a": ("def later():\n    from . import b\n", False),
        "pkg.b": ("import typing\nif typing.TYPE_CHECKING:\n    from pkg.c import C\n", False),
        "pkg.c": ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    pass\n"
                  "else:\n    from .a import A\n", False),
    }  # fmt: skip
    graph = import_graph(sources)
    assert graph == {
        "pkg": {"pkg.a": 1},
        "pkg.a": {"pkg": 2, "pkg.b": 2},
        "pkg.b": {},
        "pkg.c": {"pkg.a": 5},
    }


def test_the_cycle_check_names_the_modules_and_lines_of_a_cycle():
    graph = {"a": {"b": 3}, "b": {"c": 4}, "c": {"a": 5, "d": 6}, "d": {}, "e": {"d": 1}}
    assert strongly_connected(graph) == [["a", "b", "c"]]
    assert cycle_messages(graph) == [
        "import cycle among a, b, c: a (line 3) -> b (line 4) -> c (line 5) -> a"
    ]
    assert cycle_messages({"a": {"b": 1}, "b": {}}) == []


def test_a_module_importing_its_own_re_exporting_package_is_a_cycle():
    sources = {
        "store": ("from store.table import Table\n", True),
        "store.table": ("from store import helpers\n", False),
        "store.helpers": ("", False),
    }
    assert strongly_connected(import_graph(sources)) == [["store", "store.table"]]


def test_no_module_imports_another_that_imports_it_back():
    messages = cycle_messages(project_graph())
    assert not messages, "\n".join(messages)


# --- the client side of sdk ------------------------------------------------------------------

BROKER_SIDE_AND_TOOLS = (
    "sdk.broker",
    "sdk.server",
    "sdk.cli",
    "sdk.perf",
    "sdk.transport.in_process",
    "sdk.spark",
)


def _within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def is_client_module(module: str) -> bool:
    """An ``sdk`` module a remote client loads (see the module docstring)."""
    return _within(module, "sdk") and not any(_within(module, p) for p in BROKER_SIDE_AND_TOOLS)


def is_store_module(module: str) -> bool:
    """A module of ``localstore`` that a client may not reach (all but the record format)."""
    return _within(module, "localstore") and not _within(module, "localstore.record")


def store_reaches(graph: Graph) -> list[str]:
    """For each client module that reaches a store module, the import chain that does."""
    found = []
    for module in sorted(filter(is_client_module, graph)):
        chain = shortest_path(graph, module, is_store_module)
        if chain is not None:
            found.append(describe_chain(graph, chain))
    return found


def test_the_client_list_is_what_the_docstring_says():
    client = {m for m in project_modules() if is_client_module(m)}
    for module in ("sdk", "sdk.producer", "sdk.consumer.push", "sdk.transport.models"):
        assert module in client
    for module in (
        "sdk.broker.embedded",
        "sdk.server.app",
        "sdk.transport.in_process",
        "sdk.cli.main",
        "sdk.spark.source",
    ):
        assert module not in client
    assert not is_client_module("localstore.store") and not is_client_module("sdkx")


def test_the_client_check_follows_chains_into_the_store():
    graph = {
        "sdk.producer": {"sdk.outgoing": 7},
        "sdk.outgoing": {"localstore.record.codec": 3},
        "localstore.record.codec": {"localstore.results": 12},
        "localstore.results": {},
        "sdk.broker.service": {"localstore.store": 1},
        "localstore.store": {},
    }
    assert store_reaches(graph) == [
        "sdk.outgoing (line 3) -> localstore.record.codec (line 12) -> localstore.results",
        "sdk.producer (line 7) -> sdk.outgoing (line 3) -> localstore.record.codec (line 12)"
        " -> localstore.results",
    ]
    graph["localstore.record.codec"] = {}
    assert store_reaches(graph) == []


def test_client_modules_reach_nothing_of_localstore_but_the_record_format():
    chains = store_reaches(project_graph())
    assert not chains, "client-side sdk modules reach the store engine:\n" + "\n".join(chains)


# --- what ``import sdk`` loads ---------------------------------------------------------------

_LOADED_STORE_MODULES = (
    "[m for m in sys.modules if m == 'localstore' or m.startswith('localstore.')"
    " if not (m == 'localstore.record' or m.startswith('localstore.record.'))]"
)


def _run(code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def test_importing_sdk_loads_no_store_module():
    """A client of a remote broker pays nothing for the engine: of localstore only the package
    (whose names load on first use) and its record format are loaded."""
    loaded = _run(f"import sys, sdk; print(sorted({_LOADED_STORE_MODULES}))")
    assert loaded == "['localstore']"


def test_making_an_embedded_broker_loads_the_store(tmp_path: Path):
    code = (
        "import sys\n"
        "from sdk import EmbeddedBroker\n"
        "import sdk.broker.embedded\n"
        "assert EmbeddedBroker is sdk.broker.embedded.EmbeddedBroker\n"
        f"with EmbeddedBroker({str(tmp_path / 'data')!r}):\n"
        "    print('localstore.store' in sys.modules)\n"
    )
    assert _run(code) == "True"


def test_the_lazy_names_of_sdk_resolve_and_are_listed():
    for name, module in sdk._LAZY_EXPORTS.items():
        assert name in sdk.__all__ and name in dir(sdk)
        assert getattr(sdk, name) is getattr(importlib.import_module(module), name)
    with pytest.raises(AttributeError, match="no attribute 'Nothing'"):
        sdk.Nothing  # noqa: B018
