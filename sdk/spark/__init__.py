"""Quiver topics as a PySpark data source (format ``quiver``), behind the ``spark`` extra.

Importing this package imports pyspark and pyarrow; ``import sdk`` never does.

    from pyspark.sql import SparkSession
    from sdk.spark import QuiverDataSource

    spark = SparkSession.builder.getOrCreate()
    spark.dataSource.register(QuiverDataSource)  # or register(spark): filter pushdown when
    # the session sets spark.sql.python.filterPushdown.enabled (see sdk.spark.registration)
    orders = (
        spark.read.format("quiver")
        .option("path", "/data/quiver-store")
        .option("topics", "orders")
        .option("startingOffsets", '{"orders": {"0": 100}}')
        .load()
    )
"""

from __future__ import annotations

from sdk.spark.registration import register
from sdk.spark.source import QuiverDataSource

__all__ = ["QuiverDataSource", "register"]
