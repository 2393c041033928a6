"""What the distribution ships and declares: type hints (PEP 561), one version, and runtime
dependencies that are exactly the third-party packages the code imports."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from pathlib import Path

import sdk
from sdk._version import __version__

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("quiver_errors", "localstore", "offsetstore", "sdk")
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
# Import name -> distribution name, where they differ.
DISTRIBUTION_OF = {"uvloop": "uvloop", "zlib_ng": "zlib-ng"}


def test_each_package_ships_py_typed():
    for package in PACKAGES:
        assert (REPO / package / "py.typed").is_file(), package
    assert "py.typed" in PYPROJECT["tool"]["setuptools"]["package-data"]["*"]


def test_the_version_is_written_once_and_the_build_reads_it():
    assert sdk.__version__ == __version__
    assert re.fullmatch(r"\d+\.\d+\.\d+((a|b|rc)\d+)?(\.dev\d+)?", __version__)
    assert "version" not in PYPROJECT["project"]
    assert "version" in PYPROJECT["project"]["dynamic"]
    assert PYPROJECT["tool"]["setuptools"]["dynamic"]["version"] == {
        "attr": "sdk._version.__version__"
    }


def _requirement_name(requirement: str) -> str:
    return re.split(r"[<>=!~;\[ ]", requirement, maxsplit=1)[0].lower()


def _top_level_imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


def _third_party_imports() -> set[str]:
    return _third_party_imports_under(*PACKAGES)


def _third_party_imports_under(*directories: str) -> set[str]:
    found: set[str] = set()
    for directory in directories:
        for path in (REPO / directory).rglob("*.py"):
            found |= _top_level_imports(path)
    return {m for m in found if m not in sys.stdlib_module_names and m not in {*PACKAGES, "tests"}}


def test_runtime_dependencies_are_what_the_code_imports():
    required = {_requirement_name(r) for r in PYPROJECT["project"]["dependencies"]}
    extras = PYPROJECT["project"]["optional-dependencies"]
    optional = {_requirement_name(r) for name in ("spark", "uvloop") for r in extras[name]}
    imported = {DISTRIBUTION_OF.get(m, m) for m in _third_party_imports()}
    assert imported - required <= optional, "imported but neither required nor an extra"
    assert required <= imported, f"required but never imported: {sorted(required - imported)}"


# Development tools the dev extra installs to be run, not imported.
DEV_TOOLS = {"pytest", "pytest-timeout", "pytest-xdist", "ruff", "mypy", "coverage"}


def test_the_dev_extra_holds_tools_and_what_the_tests_import():
    """A test library stays in the dev extra only while something imports it (respx left with
    httpx; it comes back with remote mode)."""
    extras = PYPROJECT["project"]["optional-dependencies"]
    dev = {_requirement_name(r) for r in extras["dev"]} - {"quiver"}  # quiver[...]: an extra
    for requirement in extras["dev"]:
        if _requirement_name(requirement) == "quiver":
            named = re.search(r"\[(.*)\]", requirement)
            assert named and set(named.group(1).split(",")) <= extras.keys(), requirement
    imported = {DISTRIBUTION_OF.get(m, m) for m in _third_party_imports_under(*PACKAGES, "tests")}
    assert dev - DEV_TOOLS <= imported, (
        f"in the dev extra, never imported: {dev - DEV_TOOLS - imported}"
    )
