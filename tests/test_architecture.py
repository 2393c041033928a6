"""The dependency rules of architecture.md, checked on the source: one-way imports between the
packages, and ``import sdk`` staying light."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
STDLIB = sys.stdlib_module_names

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


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_package_imports_only_what_it_may(package: str):
    allowed = ALLOWED[package] | {package, "__future__"}
    for path in sorted((REPO / package).rglob("*.py")):
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


def test_importing_sdk_stays_light():
    code = (
        "import sys, sdk, localstore, offsetstore; "
        "heavy = [m for m in ('aiohttp.web', 'pyspark', 'sdk.cli', 'sdk.cli.main') "
        "if m in sys.modules]; print(heavy)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "[]"
