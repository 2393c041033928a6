"""The wire error table: every SDK error the broker may raise crosses HTTP as itself."""

from __future__ import annotations

import orjson
import pytest

from localstore.errors import StoreError
from sdk.errors import (
    ArgumentTypeError,
    BrokerUnavailableError,
    ClientClosedError,
    IllegalStateError,
    InvalidArgumentError,
    InvalidMessageError,
    MalformedBodyError,
    QuiverError,
    SendRejectedError,
    UnknownGroupError,
    UnknownTopicError,
)
from sdk.protocol.errors import WIRE_ERRORS, error_answer, error_from_answer


@pytest.mark.parametrize(
    "error",
    [
        ArgumentTypeError("listener must be callable"),
        InvalidMessageError("body is empty"),
        InvalidArgumentError("max_count must be >= 1"),
        UnknownTopicError("topic orders does not exist"),
        UnknownGroupError("group billing has no offsets"),
        IllegalStateError("group billing has running consumers"),
        ClientClosedError("producer is closed"),
        BrokerUnavailableError("the broker is closing"),
        MalformedBodyError(12, "bad magic code 0x0"),
    ],
    ids=lambda e: type(e).__name__,
)
def test_an_error_crosses_the_wire_as_its_own_class(error: QuiverError) -> None:
    status, body = error_answer(error)
    again = error_from_answer(status, body)
    assert type(again) is type(error)
    assert str(again) == str(error)
    assert again.retriable is error.retriable
    assert 400 <= status < 600


def test_a_subclass_the_table_does_not_name_travels_as_its_nearest_row() -> None:
    status, body = error_answer(StoreError("no space left on device"))
    assert status == 503 and orjson.loads(body)["code"] == "BROKER_ERROR"
    assert type(error_from_answer(status, body)) is QuiverError


def test_the_answer_carries_the_errors_own_retriable_flag() -> None:
    refused = SendRejectedError("SERVICE_NOT_AVAILABLE", "the store is closing")
    assert refused.retriable
    status, body = error_answer(refused)
    again = error_from_answer(status, body)
    assert again.retriable and "SERVICE_NOT_AVAILABLE" in str(again)


def test_an_error_outside_the_tree_is_internal_and_not_retriable() -> None:
    status, body = error_answer(KeyError("bug"))
    assert status == 500 and orjson.loads(body)["code"] == "INTERNAL"
    again = error_from_answer(status, body)
    assert type(again) is QuiverError and not again.retriable


@pytest.mark.parametrize(
    ("status", "body", "kind", "retriable"),
    [
        (503, b"<html>bad gateway</html>", BrokerUnavailableError, True),
        (502, b"", BrokerUnavailableError, True),
        (429, b'{"error": "slow down"}', BrokerUnavailableError, True),
        (404, b"not found", QuiverError, False),
        (400, b'{"code": "A_CODE_FROM_A_NEWER_BROKER", "message": "m"}', QuiverError, False),
        (
            503,
            b'{"code": "A_CODE_FROM_A_NEWER_BROKER", "message": "m"}',
            BrokerUnavailableError,
            True,
        ),
    ],
)
def test_an_answer_this_client_cannot_read_is_judged_by_its_status(
    status: int, body: bytes, kind: type[QuiverError], retriable: bool
) -> None:
    error = error_from_answer(status, body)
    assert type(error) is kind and error.retriable is retriable
    assert str(status) in str(error) or "A_CODE_FROM_A_NEWER_BROKER" in str(error)


def test_unknown_fields_are_ignored() -> None:
    body = orjson.dumps({"code": "UNKNOWN_TOPIC", "message": "m", "retriable": False, "new": 1})
    assert type(error_from_answer(404, body)) is UnknownTopicError


def test_codes_are_unique_and_statuses_are_errors() -> None:
    codes = [row.code for row in WIRE_ERRORS]
    assert len(codes) == len(set(codes))
    assert len({row.error for row in WIRE_ERRORS}) == len(WIRE_ERRORS)
    assert all(400 <= row.http_status < 600 for row in WIRE_ERRORS)
