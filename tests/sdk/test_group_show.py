"""Group observability: the live report and ``quiver group show`` on a store at rest."""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from localstore import MessageStore, NewMessage
from sdk import ConsumeFrom, EmbeddedBroker, Message, Producer, PushConsumer
from sdk.broker.group_report import queue_lags
from tests.sdk.test_cli import REPO, quiver

from .waiting import wait_until


def produce(broker: EmbeddedBroker, per_queue: int) -> None:
    with Producer(broker) as producer:
        for queue_id in range(4):
            producer.send_batch([Message("orders", b"x")] * per_queue, queue_id=queue_id)


def test_queue_lags_counts_from_the_committed_offset_or_the_min_offset(tmp_path: Path):
    with MessageStore(tmp_path / "s", commitlog_file_size=65536) as store:
        for queue_id, count in ((0, 8), (1, 2)):
            for i in range(count):
                store.put(NewMessage(topic="T", body=b"m%d" % i, queue_id=queue_id))
        rows = queue_lags("T", {0: 4, 3: 0}, store, {0: "c1"}, more_queue_ids=[5])
    got = [(r.queue_id, r.owner, r.committed, r.min_offset, r.max_offset, r.lag) for r in rows]
    assert got == [
        (0, "c1", 4, 0, 8, 4),  # committed: max - committed
        (1, None, None, 0, 2, 2),  # nothing committed: max - min
        (3, None, 0, 0, 0, 0),  # committed, never stored
        (5, None, None, 0, 0, 0),  # only asked for
    ]


def test_live_report_shows_members_owners_offsets_and_lag(tmp_path: Path):
    with EmbeddedBroker(tmp_path / "b", commitlog_file_size=1 << 20) as broker:
        produce(broker, 3)
        done: list[int] = []
        with (
            PushConsumer(broker, "billing", {"orders": "*"}, lambda ms: done.extend([1] * len(ms)),
                         consume_from=ConsumeFrom.FIRST_OFFSET) as a,
            PushConsumer(broker, "billing", {"orders": "*"}, lambda ms: None,
                         consume_from=ConsumeFrom.LAST_OFFSET) as b,
        ):  # fmt: skip
            wait_until(lambda: len(broker.service.group_report("billing").members) == 2)
            wait_until(lambda: all(q.owner for q in broker.service.group_report("billing").queues))

            def settled() -> bool:  # both members consume from 0: the queues are young
                a.persist_offsets()
                b.persist_offsets()
                orders = [
                    q for q in broker.service.group_report("billing").queues if q.topic == "orders"
                ]
                owners = collections.Counter(q.owner for q in orders)
                return owners == {a.client_id: 2, b.client_id: 2} and all(
                    q.committed == 3 for q in orders
                )

            wait_until(settled)  # the queues split two and two, every message committed
            report = broker.service.group_report("billing")
    assert report.live and {m.client_id for m in report.members} == {a.client_id, b.client_id}
    orders = [q for q in report.queues if q.topic == "orders"]
    assert len(orders) == 4 and all(q.max_offset == 3 for q in orders)
    assert all(q.committed == 3 and q.lag == 0 for q in orders)
    owned = {q.queue_id: q.owner for q in orders}
    assert sorted(collections.Counter(owned.values()).items()) == sorted(
        [(a.client_id, 2), (b.client_id, 2)]
    )  # every queue owned, two each
    for member in report.members:
        assert {f"orders/{i}" for i, o in owned.items() if o == member.client_id} <= set(
            member.queues
        )
    assert report.total_lag == 0


def test_group_show_after_a_clean_close(tmp_path: Path):
    data = tmp_path / "b"
    with EmbeddedBroker(data, commitlog_file_size=1 << 20) as broker:
        produce(broker, 5)
        seen: list[int] = []
        with PushConsumer(
            broker, "billing", {"orders": None}, lambda ms: seen.extend([1] * len(ms)),
            consume_from=ConsumeFrom.FIRST_OFFSET,
        ):  # fmt: skip
            wait_until(lambda: len(seen) == 20)
        with Producer(broker) as producer:
            producer.send(Message("orders", b"late"), queue_id=1)
    done = quiver("group", "show", "--data", data, "--group", "billing")
    assert done.returncode == 0, done.stderr
    assert "group billing: 0 member(s)" in done.stdout
    assert "orders/1: owner - committed 5 min 0 max 6 lag 1" in done.stdout
    assert "total lag 1" in done.stdout
    document = json.loads(
        quiver("group", "show", "--data", data, "--group", "billing", "--json").stdout
    )
    assert document["members"] == [] and document["total_lag"] == 1 and not document["live"]


def test_group_show_after_a_crash_lists_the_members_it_knew(tmp_path: Path):
    data = tmp_path / "b"
    script = tmp_path / "serve.py"
    script.write_text(
        textwrap.dedent(f"""
        import sys, time
        from sdk import ConsumeFrom, EmbeddedBroker, PushConsumer
        broker = EmbeddedBroker({str(data)!r}, commitlog_file_size=1 << 20)
        consumer = PushConsumer(broker, "billing", {{"orders": "paid"}}, lambda ms: None,
                                instance_name="node-a")
        consumer.start()
        print(consumer.client_id, flush=True)
        time.sleep(60)
    """)
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    child = subprocess.Popen(
        [sys.executable, str(script)], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        assert child.stdout is not None
        client_id = child.stdout.readline().strip()
        snapshot = data / "config" / "quiverConsumerGroups.json"
        wait_until(lambda: snapshot.exists() and client_id in snapshot.read_text())
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
        if child.stdout is not None:
            child.stdout.close()
    for _ in range(2):  # a command's own broker keeps the record the crashed one left
        done = quiver("group", "show", "--data", data, "--group", "billing")
        assert done.returncode == 0, done.stderr
        assert "group billing: 1 member(s)" in done.stdout
    assert f"{client_id} CLUSTERING: %RETRY%billing [*], orders [paid]" in done.stdout
    assert "queues: %RETRY%billing/0, orders/0, orders/1, orders/2, orders/3" in done.stdout


@pytest.mark.parametrize("group", ["nobody", ""])
def test_group_show_refuses_an_unknown_or_bad_group(tmp_path: Path, group: str):
    with EmbeddedBroker(tmp_path / "b", commitlog_file_size=1 << 20):
        pass
    done = quiver("group", "show", "--data", tmp_path / "b", "--group", group)
    assert done.returncode == (1 if group else 2)
    assert ("no members or offsets" if group else "bad group name") in done.stderr
