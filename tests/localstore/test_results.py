"""What puts answer: the PUT_OK result the put paths build without the dataclass ``__init__``."""

from __future__ import annotations

import dataclasses

from localstore import PutResult, PutStatus
from localstore.results import stored_result


def test_stored_result_equals_the_constructors_result_field_for_field() -> None:
    host = bytes(range(8))
    built = stored_result("Orders", 3, 17, [1024, 1224], 1_700_000_000_123, host)
    expected = PutResult(
        PutStatus.PUT_OK, "", "Orders", 3, 17, [1024, 1224], 1_700_000_000_123, host
    )
    # Every field is read, so a field added to PutResult but not set here fails this test.
    for field in dataclasses.fields(PutResult):
        assert getattr(built, field.name) == getattr(expected, field.name), field.name
    assert built == expected and built.ok and built.phys_offset == 1024
