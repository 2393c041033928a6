"""The checked JSON shapes of :mod:`sdk.protocol.shapes`: a list of integers (a send's commitlog
offsets) is taken whole when every item is a Java long, and an item that is not is named by
its index."""

from __future__ import annotations

from typing import Any

import pytest

from sdk.errors import InvalidArgumentError
from sdk.protocol.shapes import INT, INT64_MAX, INT64_MIN, SEND_RESULT, list_of
from sdk.transport.models import SendResult

INTS = list_of(INT)


def test_a_list_of_longs_decodes_as_it_came() -> None:
    value = [0, 7, INT64_MIN, INT64_MAX, 1 << 40]
    assert INTS.decode(value, "phys_offsets") == value
    assert INTS.decode([], "phys_offsets") == []
    assert list_of(INT, as_tuple=True).decode([1, 2], "f") == (1, 2)


@pytest.mark.parametrize(
    ("bad", "named"),
    [
        (True, "an integer"),  # a bool is an int to Python, not on the wire
        ("12", "an integer"),
        (1.5, "an integer"),
        (None, "an integer"),
        (INT64_MAX + 1, "in ["),
        (INT64_MIN - 1, "in ["),
    ],
)
def test_an_item_that_is_not_a_long_is_refused_by_its_index(bad: Any, named: str) -> None:
    with pytest.raises(
        InvalidArgumentError, match=r"phys_offsets\[2\]: want .*" + named.replace("[", r"\[")
    ):
        INTS.decode([1, 2, bad, 4], "phys_offsets")


def test_a_send_answer_round_trips() -> None:
    result = SendResult("PUT_OK", "", "t", 3, 10, [100, 250, 400], "7F0000010000271F", 5)
    assert SEND_RESULT.decode(SEND_RESULT.encode(result), "send answer") == result
