""":func:`register`: the ``quiver`` format on a Spark session, with filter pushdown when the
session allows it.

Spark (4.1+) passes filters to a Python source only when ``spark.sql.python.filterPushdown.enabled``
is true, and fails a read whose reader defines ``pushFilters`` while it is false; pyspark 4.0
has no pushdown at all. So the class registered follows the session: the pushdown one
(:class:`sdk.spark.pushdown.QuiverPushdownDataSource`) when the setting is true and pyspark has
the filter API, else the plain :class:`sdk.spark.source.QuiverDataSource`. Both read the same
rows; pushdown only reads fewer of them.
"""

from __future__ import annotations

from typing import Any

from sdk.spark.pyspark_api import FILTER_PUSHDOWN
from sdk.spark.source import QuiverDataSource

PUSHDOWN_SETTING = "spark.sql.python.filterPushdown.enabled"


def register(spark: Any) -> type[QuiverDataSource]:
    """Register the ``quiver`` format on session ``spark`` (set :data:`PUSHDOWN_SETTING`
    first to push filters down); returns the class registered."""
    chosen: type[QuiverDataSource] = QuiverDataSource
    enabled = str(spark.conf.get(PUSHDOWN_SETTING, "false")).strip().lower() == "true"
    if enabled and FILTER_PUSHDOWN:
        from sdk.spark.pushdown import QuiverPushdownDataSource  # noqa: PLC0415 (4.1+ only)

        chosen = QuiverPushdownDataSource
    spark.dataSource.register(chosen)
    return chosen
