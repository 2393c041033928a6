"""The Spark tests on a pyspark that leaves its collect sockets to the garbage collector
(:data:`tests.spark.pyspark_versions.COLLECT_LEAVES_SOCKETS_OPEN`): their ResourceWarning is
ignored there, as pytest would otherwise fail the test that happened to free one."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.spark.pyspark_versions import COLLECT_LEAVES_SOCKETS_OPEN

HERE = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if not COLLECT_LEAVES_SOCKETS_OPEN:
        return
    for item in items:
        if item.path.is_relative_to(HERE) and item.get_closest_marker("spark") is not None:
            item.add_marker(pytest.mark.filterwarnings("ignore:unclosed <socket:ResourceWarning"))
