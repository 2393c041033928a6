"""The ``localstore`` package imports its public names on first use (PEP 562)."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

import localstore


def test_every_public_name_resolves_to_its_module_object() -> None:
    assert sorted(localstore.__all__) == sorted(localstore._EXPORTS)  # the two lists agree
    for name, module in localstore._EXPORTS.items():
        assert getattr(localstore, name) is getattr(importlib.import_module(module), name)


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'Nothing'"):
        localstore.Nothing  # noqa: B018


def test_importing_the_package_loads_no_store_module() -> None:
    code = "import sys, localstore; print([m for m in sys.modules if m.startswith('localstore.')])"
    answer = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert answer.stdout.strip() == "[]"
