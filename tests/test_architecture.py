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
    "localstore": {"orjson", "filelock"},
    "offsetstore": {"orjson", "filelock", "tenacity"},
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


def test_nothing_imports_the_cli():
    for package in ("localstore", "offsetstore", "sdk"):
        for path in sorted((REPO / package).rglob("*.py")):
            if "cli" in path.relative_to(REPO).parts:
                continue
            source = path.read_text()
            assert "sdk.cli" not in source, f"{path.relative_to(REPO)} imports the CLI"


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
