"""A pull consumer that lets several queues go commits their final offsets in one call per
broker, and only then gives their leases back (in one call): a queue's next owner never starts
below a commit still to come, and a rebalance costs no broker round trip per queue."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from offsetstore import MessageQueue
from sdk import ConsumeFrom, EmbeddedBroker, Message, Producer, PullConsumer
from sdk.transport.base import BrokerTransport
from sdk.transport.resolve import resolve

TOPIC = "LetGoMany"
GROUP = "g"


class Recording:
    """The real transport, recording the commits and unlocks it makes, in order."""

    def __init__(self, real: BrokerTransport) -> None:
        self.real = real
        self.calls: list[tuple[str, set[MessageQueue]]] = []

    def __getattr__(self, name: str) -> object:
        return getattr(self.real, name)

    def commit_offsets(
        self, broker_name: str, group: str, offsets: Mapping[MessageQueue, int]
    ) -> None:
        self.calls.append(("commit", set(offsets)))
        self.real.commit_offsets(broker_name, group, offsets)

    def unlock_queues(self, group: str, client_id: str, queues: list[MessageQueue]) -> None:
        self.calls.append(("unlock", set(queues)))
        self.real.unlock_queues(group, client_id, queues)


def test_queues_let_go_are_committed_in_one_call_before_their_leases_go(tmp_path: Path) -> None:
    with EmbeddedBroker(tmp_path / "b", commitlog_file_size=1 << 20) as broker:
        transport = Recording(resolve(broker))
        with PullConsumer(transport, GROUP, consume_from=ConsumeFrom.FIRST_OFFSET) as first:
            first.subscribe([TOPIC])
            queues = first.assignment()
            with Producer(broker) as producer:
                for queue in queues:
                    producer.send(Message(TOPIC, b"m"), queue_id=queue.queue_id)
            got: list[object] = []
            for _ in range(300):
                if len(got) >= len(queues):
                    break
                got.extend(first.poll(0.1))
            assert len(got) == len(queues)
            with PullConsumer(broker, GROUP, consume_from=ConsumeFrom.FIRST_OFFSET) as second:
                second.subscribe([TOPIC])
                transport.calls.clear()
                for _ in range(300):
                    if len(first.assignment()) < len(queues):
                        break
                    first.poll(0.1)
                let_go = set(queues) - set(first.assignment())
                assert len(let_go) >= 2
                unlocks = [i for i, (name, qs) in enumerate(transport.calls) if name == "unlock"]
                assert len(unlocks) == 1 and transport.calls[unlocks[0]][1] == let_go
                commits = [qs for name, qs in transport.calls[: unlocks[0]] if name == "commit"]
                assert [qs & let_go for qs in commits if qs & let_go] == [let_go]
