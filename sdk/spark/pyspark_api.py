"""What the installed pyspark's Python Data Source API offers: the one place the ``quiver``
source asks which pyspark it runs on (the ``spark`` extra allows 4.0 through 4.3).

Each feature is found by importing the API that carries it, never by comparing versions:

=============================  =======  ===============================================
feature                        pyspark  without it
=============================  =======  ===============================================
the Python Data Source API     4.0      importing :mod:`sdk.spark` fails, naming the
                                        version found (:func:`check_supported`)
filter pushdown (``Filter``)   4.1      :func:`sdk.spark.register` registers the plain
                                        source, Spark filters every row itself;
                                        :mod:`sdk.spark.pushdown` refuses to import
Arrow batches to stream sinks  4.1      the stream sink gathers Spark's rows into record
(``DataSourceStreamArrowWriter``)       batches itself
admission control (read        4.2      ``maxOffsetsPerTrigger`` is refused
limits, ``SupportsTrigger-              (:func:`require_admission_control`), never
AvailableNow``)                         ignored; ``Trigger.AvailableNow`` reads each
                                        queue's latest offset at the start in one
                                        micro-batch (Spark's own wrapper)
=============================  =======  ===============================================

Without admission control the names of pyspark 4.2's ``pyspark.sql.streaming.datasource`` are
stand-ins here, so the stream reader is one class on every version: Spark 4.0 and 4.1 never
pass a read limit nor call ``prepareForTriggerAvailableNow``.
"""

from __future__ import annotations

import re

import pyspark

from quiver_errors import InvalidArgumentError

PYSPARK_VERSION: str = pyspark.__version__
OLDEST_SUPPORTED = (4, 0)


def check_supported(version: str) -> None:
    """Raise ImportError, naming ``version``, when that pyspark has no Python Data Source API."""
    found = re.match(r"(\d+)\.(\d+)", version)
    if found is None or (int(found[1]), int(found[2])) < OLDEST_SUPPORTED:
        raise ImportError(
            f"the quiver data source needs pyspark 4.0 or later (the Python Data Source API); "
            f"this is pyspark {version}: install quiver[spark]"
        )


check_supported(PYSPARK_VERSION)

import pyspark.sql.datasource as _datasource  # noqa: E402 (after the version check)

FILTER_PUSHDOWN: bool = hasattr(_datasource, "Filter")

try:  # pyspark 4.1 and later
    from pyspark.sql.datasource import DataSourceStreamArrowWriter as StreamWriterBase

    STREAM_SINK_TAKES_ARROW = True
except ImportError:  # pyspark 4.0: the stream sink is given Rows
    from pyspark.sql.datasource import (  # type: ignore[assignment]
        DataSourceStreamWriter as StreamWriterBase,
    )

    STREAM_SINK_TAKES_ARROW = False

try:  # pyspark 4.2 and later
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadLimit,
        ReadMaxRows,
        SupportsTriggerAvailableNow,
    )

    ADMISSION_CONTROL = True
except ImportError:  # pyspark 4.0 and 4.1: no read limits, AvailableNow by Spark's own wrapper
    ADMISSION_CONTROL = False

    class ReadLimit:  # type: ignore[no-redef]
        """Stands in for pyspark 4.2's; never passed on 4.0 and 4.1."""

    class ReadAllAvailable(ReadLimit):  # type: ignore[no-redef]
        """Stands in for pyspark 4.2's; never passed on 4.0 and 4.1."""

    class ReadMaxRows(ReadLimit):  # type: ignore[no-redef]
        """Stands in for pyspark 4.2's; never passed on 4.0 and 4.1."""

        max_rows = 0

    class SupportsTriggerAvailableNow:  # type: ignore[no-redef]
        """Stands in for pyspark 4.2's mixin; 4.0 and 4.1 never call it."""


def require_filter_pushdown(module: str) -> None:
    """Refuse to import ``module``, built on pyspark 4.1's filter classes, on pyspark 4.0."""
    if not FILTER_PUSHDOWN:
        raise ImportError(
            f"{module} needs pyspark 4.1 or later (filter pushdown); this is pyspark "
            f"{PYSPARK_VERSION}: register sdk.spark.QuiverDataSource, or let sdk.spark.register "
            "choose"
        )


def require_admission_control(option: str) -> None:
    """Refuse ``option``, a read limit, on a pyspark without admission control (4.0, 4.1):
    Spark there asks a source for its latest offsets without a limit, so the option could
    only be ignored."""
    if not ADMISSION_CONTROL:
        raise InvalidArgumentError(
            f"{option}: needs pyspark 4.2 or later (admission control); this is pyspark "
            f"{PYSPARK_VERSION}, whose micro-batches read every available record"
        )


__all__ = [
    "ADMISSION_CONTROL",
    "FILTER_PUSHDOWN",
    "PYSPARK_VERSION",
    "STREAM_SINK_TAKES_ARROW",
    "ReadAllAvailable",
    "ReadLimit",
    "ReadMaxRows",
    "StreamWriterBase",
    "SupportsTriggerAvailableNow",
    "check_supported",
    "require_admission_control",
    "require_filter_pushdown",
]
