"""The ``quiver`` source's row schema, one list for Spark's DDL and the record batches.

``body`` is a column only with ``includeBody`` (the default), ``properties`` (the user's
properties; the system ones are columns of their own) only with ``includeProperties``. The
order here is the order of the columns in both the DDL and every record batch.
"""

from __future__ import annotations

# (column, Spark SQL type); the Arrow types in sdk.spark.batches match these one for one.
COLUMNS = (
    ("topic", "string"),
    ("queue_id", "int"),
    ("queue_offset", "long"),
    ("msg_id", "string"),
    ("offset_msg_id", "string"),
    ("tags", "string"),
    ("keys", "array<string>"),
    ("body", "binary"),
    ("born_timestamp", "timestamp"),
    ("store_timestamp", "timestamp"),
    ("reconsume_times", "int"),
    ("properties", "map<string,string>"),
)


def column_names(include_body: bool, include_properties: bool) -> list[str]:
    """The columns a read with these options yields, in order."""
    left_out = {"body"} if not include_body else set()
    if not include_properties:
        left_out.add("properties")
    return [name for name, _ in COLUMNS if name not in left_out]


def schema_ddl(include_body: bool, include_properties: bool) -> str:
    """The schema as a Spark DDL string (``"topic string, queue_id int, ..."``)."""
    types = dict(COLUMNS)
    return ", ".join(
        f"{name} {types[name]}" for name in column_names(include_body, include_properties)
    )
