"""The operation table: every control-plane method of the transport seam, encoded once.

A loopback transport sends each control call through the table's encodings (client side, then
broker side, then back) to a real embedded broker, and real clients run over it: if a shape or
a parameter were wrong, the group would not form or the offsets would not land.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from sdk import Admin, ConsumeFrom, EmbeddedBroker, Message, Producer, PullConsumer
from sdk.errors import (
    ArgumentTypeError,
    IllegalStateError,
    InvalidArgumentError,
    QuiverError,
    UnknownGroupError,
    UnknownTopicError,
)
from sdk.protocol.errors import error_answer, error_from_answer
from sdk.protocol.operations import (
    CONTROL_OPERATIONS,
    decode_answer,
    decode_request,
    encode_answer,
    encode_request,
)
from sdk.transport.base import BrokerTransport
from sdk.transport.in_process import InProcessTransport

# Transport methods that move message bytes (binary bodies) or manage the transport itself.
NOT_CONTROL = {
    "send", "send_half", "pull", "fetch_transaction_checks", "query_by_key", "query_by_id",
    "close", "broker_name",
}  # fmt: skip


def transport_methods() -> dict[str, inspect.Signature]:
    return {
        name: inspect.signature(member)
        for name, member in inspect.getmembers(BrokerTransport)
        if not name.startswith("_") and callable(member)
    }


def test_each_operation_is_a_transport_method_with_the_same_parameters() -> None:
    methods = transport_methods()
    for name, operation in CONTROL_OPERATIONS.items():
        params = [p for p in methods[name].parameters.values() if p.name != "self"]
        assert [p.name for p in params] == [p.name for p in operation.params], name
        keyword = [p.kind is inspect.Parameter.KEYWORD_ONLY for p in params]
        assert keyword == [p.keyword for p in operation.params], name
        required = [p.default is inspect.Parameter.empty for p in params]
        assert required == [p.required for p in operation.params], name
        defaults = [p.default for p in params if p.default is not inspect.Parameter.empty]
        assert defaults == [p.default for p in operation.params if not p.required], name


def test_every_method_that_moves_no_message_bytes_is_in_the_table() -> None:
    assert set(transport_methods()) - NOT_CONTROL == set(CONTROL_OPERATIONS)


def test_the_membership_offsets_and_leases_methods_are_all_in_the_table() -> None:
    core = {
        "queue_count", "min_offset", "max_offset", "offset_for_timestamp", "query_offset",
        "commit_offsets", "start_offsets", "heartbeat", "unregister", "lock_queues",
        "unlock_queues", "group_view", "rebalance_view", "send_back", "end_transaction",
    }  # fmt: skip
    assert core <= set(CONTROL_OPERATIONS)
    assert not NOT_CONTROL & set(CONTROL_OPERATIONS)


class Loopback:
    """A BrokerTransport whose control calls cross the wire encodings both ways."""

    def __init__(self, real: InProcessTransport) -> None:
        self.real = real
        self.broker_name = real.broker_name
        self.crossed: list[str] = []

    def __getattr__(self, name: str) -> Callable[..., Any]:
        operation = CONTROL_OPERATIONS.get(name)
        method = getattr(self.real, name)
        if operation is None:
            return method  # type: ignore[no-any-return]

        def call(*args: Any, **kwargs: Any) -> Any:
            body = encode_request(operation, args, kwargs)  # the client
            self.crossed.append(name)
            try:  # the broker
                server_args, server_kwargs = decode_request(operation, body)
                answer = encode_answer(operation, method(*server_args, **server_kwargs))
            except QuiverError as exc:
                raise error_from_answer(*error_answer(exc)) from None  # the client, refused
            return decode_answer(operation, answer)  # the client again

        return call


def test_clients_work_over_the_encoded_control_plane(tmp_path: Path) -> None:
    with EmbeddedBroker(tmp_path / "b", commitlog_file_size=1 << 20) as broker:
        loopback = Loopback(InProcessTransport(broker.service))
        with Producer(loopback) as producer:
            for i in range(10):
                producer.send(Message("Wire", f"m{i}".encode()))
        with PullConsumer(loopback, "g", consume_from=ConsumeFrom.FIRST_OFFSET) as consumer:
            consumer.subscribe(["Wire"])
            got: list[bytes] = []
            for _ in range(50):
                got += [m.body for m in consumer.poll(0.1)]
                if len(got) == 10:
                    break
            consumer.commit()
            committed = {q.queue_id: consumer.committed(q) for q in consumer.assignment()}
        assert sorted(got) == [f"m{i}".encode() for i in range(10)]
        assert sum(v or 0 for v in committed.values()) == 10
        assert {
            "heartbeat",
            "rebalance_view",
            "lock_queues",
            "commit_offsets",
            "start_offsets",
        } <= set(loopback.crossed)


def test_a_request_missing_a_parameter_or_of_the_wrong_kind_is_refused_by_name() -> None:
    operation = CONTROL_OPERATIONS["commit_offsets"]
    with pytest.raises(InvalidArgumentError, match="offsets is missing"):
        decode_request(operation, orjson.dumps({"broker_name": "b", "group": "g"}))
    with pytest.raises(InvalidArgumentError, match=r"offsets\[0\]"):
        decode_request(
            operation, orjson.dumps({"broker_name": "b", "group": "g", "offsets": [["t", "b"]]})
        )
    with pytest.raises(InvalidArgumentError, match="group: want a string"):
        decode_request(operation, orjson.dumps({"broker_name": "b", "group": 7, "offsets": []}))
    with pytest.raises(InvalidArgumentError, match="JSON object"):
        decode_request(operation, b"[1, 2]")
    with pytest.raises(InvalidArgumentError, match="not JSON"):
        decode_request(operation, b"{")


def test_defaults_fill_keyword_parameters_and_unknown_fields_are_ignored() -> None:
    operation = CONTROL_OPERATIONS["send_back"]
    body = orjson.dumps({"group": "g", "phys_offset": 12, "from_a_newer_client": True})
    assert decode_request(operation, body) == (
        ["g", 12],
        {"delay_level": 0, "max_reconsume_times": -1, "reconsume_times": -1},
    )


def test_a_call_the_method_would_refuse_is_refused_before_it_is_sent() -> None:
    operation = CONTROL_OPERATIONS["queue_count"]
    with pytest.raises(ArgumentTypeError, match="missing topic"):
        encode_request(operation)
    with pytest.raises(ArgumentTypeError, match="positional"):
        encode_request(operation, ("a", "b"))
    with pytest.raises(ArgumentTypeError, match="takes no color"):
        encode_request(operation, ("a",), {"color": 1})


def test_administration_works_over_the_encoded_control_plane(tmp_path: Path) -> None:
    with EmbeddedBroker(tmp_path / "b", commitlog_file_size=1 << 20) as broker:
        loopback = Loopback(InProcessTransport(broker.service))
        with Admin(loopback) as admin:
            created = admin.create_topic("Admin", 2)
            assert (created.name, created.read_queue_nums, created.write_queue_nums) == (
                "Admin",
                2,
                2,
            )
            with Producer(loopback) as producer:
                for i in range(4):
                    producer.send(Message("Admin", f"m{i}".encode()), queue_id=i % 2)
            moved = admin.reset_offsets("billing", "Admin", to="latest", create=True)
            assert sorted((r.queue_id, r.previous, r.offset) for r in moved) == [
                (0, None, 2),
                (1, None, 2),
            ]
            moved = admin.reset_offsets("billing", "Admin", offsets={0: 1})
            assert [(r.queue_id, r.offset) for r in moved] == [(0, 1)]
            assert [(q.queue_id, q.committed, q.lag) for q in admin.lag("billing", "Admin")] == [
                (0, 1, 1),
                (1, 2, 0),
            ]
            described = admin.describe_group("billing")
            assert described.group == "billing" and described.total_lag == 1
            assert "billing" in [g.group for g in admin.list_groups()]
            assert admin.update_topic("Admin", perm=4).perm == 4
            assert "Admin" in [t.name for t in admin.list_topics()]
            assert admin.delete_topic("Admin") == [0, 1]
        assert {"create_topic", "reset_offsets", "group_lag", "delete_topic"} <= set(
            loopback.crossed
        )


def test_refusals_cross_the_wire_as_the_sdks_errors(tmp_path: Path) -> None:
    with EmbeddedBroker(tmp_path / "b", commitlog_file_size=1 << 20) as broker:
        loopback = Loopback(InProcessTransport(broker.service))
        with Admin(loopback) as admin:
            with pytest.raises(UnknownGroupError, match="nobody"):
                admin.describe_group("nobody")
            with pytest.raises(UnknownTopicError, match="Missing"):
                admin.delete_topic("Missing")
            admin.create_topic("Twice", 1)
            with pytest.raises(IllegalStateError, match="already exists"):
                admin.create_topic("Twice", 1)
            with pytest.raises(InvalidArgumentError):
                admin.create_topic("Bad", 0)


def test_an_integer_beyond_a_java_long_is_refused() -> None:
    # orjson reads integers up to 2**64 - 1 as ints; the store and every peer hold a long
    operation = CONTROL_OPERATIONS["send_back"]
    for too_big in (b"9223372036854775808", b"18446744073709551615"):
        with pytest.raises(InvalidArgumentError, match="phys_offset: want an integer in"):
            decode_request(operation, b'{"group": "g", "phys_offset": ' + too_big + b"}")
    assert decode_request(operation, b'{"group": "g", "phys_offset": 9223372036854775807}')[0] == [
        "g",
        2**63 - 1,
    ]


@pytest.mark.parametrize(
    ("queue_id", "offset", "problem"),
    [
        (0, -1, "offset"),
        (0, 2**64 - 1, "offset"),
        (-3, 1, "queue id"),
        (2**31, 1, "queue id"),
    ],
)
def test_committed_offsets_outside_the_offset_files_bounds_are_refused(
    queue_id: int, offset: int, problem: str
) -> None:
    # taken, they would be written to consumerOffset.json, which then refuses to load
    body = orjson.dumps(
        {"broker_name": "b", "group": "g", "offsets": [["t", "b", queue_id, offset]]}
    )
    with pytest.raises(InvalidArgumentError, match=rf"offsets\[0\] {problem}: want an integer"):
        decode_request(CONTROL_OPERATIONS["commit_offsets"], body)


def test_a_queue_id_outside_a_java_int_is_refused_in_a_queue() -> None:
    body = orjson.dumps({"group": "g", "client_id": "c", "queues": [["t", "b", 2**40]]})
    with pytest.raises(InvalidArgumentError, match=r"queues\[0\] queue id: want an integer"):
        decode_request(CONTROL_OPERATIONS["lock_queues"], body)


@pytest.mark.parametrize("name", ["delay_level", "max_reconsume_times", "reconsume_times"])
def test_a_send_back_count_beyond_a_java_int_is_refused_not_a_broker_error(
    tmp_path: Path, name: str
) -> None:
    # the store packs these in 4 bytes: taken, the call fails inside the broker (a 500)
    operation = CONTROL_OPERATIONS["send_back"]
    with EmbeddedBroker(tmp_path / "b", commitlog_file_size=1 << 20) as broker:
        with Producer(broker) as producer:
            phys_offset = producer.send(Message("Back", b"m")).phys_offset
        body = orjson.dumps({"group": "g", "phys_offset": phys_offset, name: 2**31})
        with pytest.raises(InvalidArgumentError, match=f"{name}: want an integer in"):
            args, kwargs = decode_request(operation, body)
            InProcessTransport(broker.service).send_back(*args, **kwargs)


def test_a_field_missing_from_an_answer_gets_a_default_of_its_own() -> None:
    # an older broker's answer without phys_offsets: each result gets its own empty list
    operation = CONTROL_OPERATIONS["send_back"]
    answer = orjson.dumps(
        {"status": "PUT_OK", "detail": "", "topic": "t", "queue_id": 0, "queue_offset": 1}
        | {"store_host": "h", "store_timestamp": 2}
    )
    first, second = decode_answer(operation, answer), decode_answer(operation, answer)
    assert first.phys_offsets == [] and first.phys_offsets is not second.phys_offsets
