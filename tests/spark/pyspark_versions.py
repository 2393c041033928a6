"""Tests that hold on some pyspark versions only, selected by the installed pyspark's features
(:mod:`sdk.spark.pyspark_api`): each marker's skip names the version found and the feature, and
the tests of the other versions' behaviour carry the opposite marker, so every version runs
the tests of what it does."""

from __future__ import annotations

import pytest

from sdk.spark.pyspark_api import ADMISSION_CONTROL, FILTER_PUSHDOWN, PYSPARK_VERSION

with_admission_control = pytest.mark.skipif(
    not ADMISSION_CONTROL,
    reason=f"pyspark {PYSPARK_VERSION} has no admission control (4.2+)",
)
without_admission_control = pytest.mark.skipif(
    ADMISSION_CONTROL,
    reason=f"pyspark {PYSPARK_VERSION} has admission control: maxOffsetsPerTrigger is honoured",
)
with_filter_pushdown = pytest.mark.skipif(
    not FILTER_PUSHDOWN,
    reason=f"pyspark {PYSPARK_VERSION} has no filter pushdown for Python sources (4.1+)",
)
without_filter_pushdown = pytest.mark.skipif(
    FILTER_PUSHDOWN,
    reason=f"pyspark {PYSPARK_VERSION} has filter pushdown for Python sources",
)

# pyspark 4.0 and 4.1 leave the socket of each collect to the JVM (``toArrow``, ``collect``)
# to the garbage collector (``pyspark.util._load_from_socket``; 4.2 closes it), which warns
# "unclosed <socket.socket ...>". The warning cannot tell pyspark's sockets from others, so
# it is ignored on those versions only: runs on 4.2+ still catch every socket left open.
COLLECT_LEAVES_SOCKETS_OPEN = tuple(map(int, PYSPARK_VERSION.split(".")[:2])) < (4, 2)
