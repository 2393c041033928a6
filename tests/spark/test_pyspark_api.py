"""What the ``quiver`` source does on each pyspark (:mod:`sdk.spark.pyspark_api`): a pyspark
without the Python Data Source API is refused naming its version, and on 4.0 the pushdown
module refuses to import, naming the version and what to register instead."""

from __future__ import annotations

import importlib

import pytest

from sdk.spark.pyspark_api import PYSPARK_VERSION, check_supported
from tests.spark.pyspark_versions import without_filter_pushdown


@pytest.mark.parametrize("version", ["3.5.7", "2.4.8", "unknown"])
def test_a_pyspark_without_the_data_source_api_is_refused_naming_its_version(version: str):
    with pytest.raises(ImportError, match=rf"needs pyspark 4\.0 or later.* pyspark {version}:"):
        check_supported(version)


@pytest.mark.parametrize("version", ["4.0.0", "4.1.4", "4.3.0", "4.4.0.dev1", PYSPARK_VERSION])
def test_pysparks_with_the_data_source_api_are_accepted(version: str):
    check_supported(version)


@without_filter_pushdown
def test_the_pushdown_module_refuses_to_import_naming_the_version():
    with pytest.raises(
        ImportError,
        match=rf"^sdk\.spark\.pushdown needs pyspark 4\.1 or later .* pyspark {PYSPARK_VERSION}: ",
    ):
        importlib.import_module("sdk.spark.pushdown")
