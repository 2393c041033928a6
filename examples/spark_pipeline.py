"""A data pipeline on Spark: read a topic, aggregate, write the results to a topic and to Parquet.

The script starts ``quiver broker --data DIR/store --port 0`` as a child process and sends 600
orders (JSON: customer, amount in cents, order time) to topic ``orders``, each customer's
orders to one queue (``sharding_key``). A local Spark session (``local[*]``, the ``spark``
extra and Java 17) then

1. reads ``orders`` from the broker over HTTP (``spark.read.format("quiver").option("broker",
   URL)``: the planner asks the broker for the queues' bounds, the tasks pull their ranges),
2. totals the amounts per customer and minute of order time,
3. writes the totals to topic ``order-totals`` (``df.write.format("quiver")``, each executor
   task a producer of the broker; a task Spark retries stores nothing twice) and to Parquet
   (``DIR/totals.parquet``),

and reads both back to check they agree with totals computed here without Spark.

    .venv/bin/python examples/spark_pipeline.py [DIR]
"""

from __future__ import annotations

import json
import os
import sys
from collections import Counter
from pathlib import Path

from _example import run_example, say, start_broker, stop_broker

from sdk import Message, Producer

ORDERS = 600
CUSTOMERS = 7
START_MS = 1_790_000_000_000 - 1_790_000_000_000 % 60_000  # a whole minute


def order(number: int) -> dict[str, int | str]:
    """Order ``number``: one every 5 s, customers in turn, amounts 100-1099 cents."""
    return {
        "customer": f"c{number % CUSTOMERS}",
        "amount_cents": 100 + number * 37 % 1000,
        "ordered_ms": START_MS + number * 5_000,
    }


def expected_totals() -> Counter[tuple[str, int]]:
    """(customer, minute start ms) -> cents, computed without Spark."""
    totals: Counter[tuple[str, int]] = Counter()
    for number in range(ORDERS):
        placed = order(number)
        minute = int(placed["ordered_ms"]) // 60_000 * 60_000
        totals[str(placed["customer"]), minute] += int(placed["amount_cents"])
    return totals


def send_orders(url: str) -> None:
    with Producer(url) as producer:
        for number in range(ORDERS):
            placed = order(number)
            message = Message("orders", json.dumps(placed).encode())
            producer.send(message, sharding_key=str(placed["customer"]))


def pipeline(url: str, parquet: Path) -> tuple[Counter[tuple[str, int]], int, int]:
    """Run the Spark job; answers the totals read back from the topic, and the row counts of
    the topic and of the Parquet files."""
    from pyspark.sql import SparkSession  # noqa: PLC0415 (the spark extra)
    from pyspark.sql import functions as f  # noqa: PLC0415

    from sdk.spark import QuiverDataSource  # noqa: PLC0415

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (
        SparkSession.builder.master("local[*]")
        .appName("quiver-spark-pipeline")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    try:
        spark.dataSource.register(QuiverDataSource)
        orders = spark.read.format("quiver").option("broker", url).option("topics", "orders").load()
        shape = "customer string, amount_cents long, ordered_ms long"
        parsed = orders.select(f.from_json(f.col("body").cast("string"), shape).alias("o"))
        totals = (
            parsed.select(
                "o.customer",
                "o.amount_cents",
                (f.col("o.ordered_ms") - f.col("o.ordered_ms") % 60_000).alias("minute_ms"),
            )
            .groupBy("customer", "minute_ms")
            .agg(f.sum("amount_cents").alias("total_cents"), f.count("*").alias("orders"))
            .cache()
        )
        read, made = orders.count(), totals.count()
        say(f"2. Spark read {read} orders from the broker and made {made} totals")
        (
            totals.select(
                f.to_json(f.struct("customer", "minute_ms", "total_cents", "orders")).alias(
                    "value"
                ),
                f.col("customer").alias("sharding_key"),
                f.lit("total").alias("tags"),
            )
            .write.format("quiver")
            .option("broker", url)
            .option("topic", "order-totals")
            .mode("append")
            .save()
        )
        totals.write.mode("overwrite").parquet(str(parquet))
        say(f"3. the totals went to topic order-totals and to {parquet.name}")
        back = spark.read.format("quiver").option("broker", url).option("topics", "order-totals")
        written = [json.loads(row.body) for row in back.load().select("body").collect()]
        parquet_rows = spark.read.parquet(str(parquet)).count()
    finally:
        spark.stop()
    found: Counter[tuple[str, int]] = Counter()
    for total in written:
        found[total["customer"], total["minute_ms"]] += total["total_cents"]
    return found, len(written), parquet_rows


def run(data: Path) -> int:
    broker, url = start_broker(data / "store")
    try:
        say(f"1. a broker serves {data / 'store'} at {url}; sending {ORDERS} orders")
        send_orders(url)
        found, topic_rows, parquet_rows = pipeline(url, data / "totals.parquet")
    finally:
        status = stop_broker(broker)
    expected = expected_totals()
    agree = found == expected and topic_rows == parquet_rows == len(expected)
    say(
        f"4. order-totals holds {topic_rows} totals, the Parquet files {parquet_rows}; "
        f"{'they match' if agree else 'they DO NOT match'} the {len(expected)} totals "
        "computed without Spark"
    )
    say(f"5. the broker stopped cleanly (exit status {status})")
    return 0 if agree and status == 0 else 1


if __name__ == "__main__":
    sys.exit(run_example(run, default_name="spark-pipeline", store="store", make=True))
