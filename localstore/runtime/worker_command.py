"""How the store starts its helper interpreters (the recovery scan's and the key index's): the
same Python, importing this very ``localstore`` package.

``python -m`` would put the current directory first on ``sys.path``, where an application may
keep a different ``localstore`` (or an old checkout of this one), so the child runs with ``-P``
(Python 3.11+: no such entry) and with this package's parent directory first on
``PYTHONPATH``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

# The directory that holds the ``localstore`` package (this file is localstore/runtime/...).
_PACKAGE_PARENT = Path(__file__).resolve().parents[2]


def worker_command(module: str, *arguments: str) -> list[str]:
    """The command line that runs ``module`` (``localstore.something``) with ``arguments``."""
    return [sys.executable, "-P", "-m", module, *arguments]


def worker_env() -> dict[str, str]:
    """This process's environment, with this package's parent first on ``PYTHONPATH``."""
    package_parent = str(_PACKAGE_PARENT)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_parent, env.get("PYTHONPATH")) if p)
    return env
