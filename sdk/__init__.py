"""sdk: what applications import: producers, consumers and brokers.

    from sdk import EmbeddedBroker, Producer, PushConsumer, Message, ConsumeResult

    with EmbeddedBroker("./data") as broker:
        with Producer(broker) as producer:
            producer.send(Message("orders", b"...", tags="paid", keys=["order-42"]))

Every client takes a broker URL in place of the embedded broker to reach a running broker over
HTTP (``Producer("http://host:8080")``, or :class:`RemoteBroker` for timeouts and retries);
httpx and aiohttp are imported only then.
Importing ``sdk`` never imports the CLI, aiohttp's server side or pyspark, nor the store engine
(nothing of ``localstore`` beyond its record format): :class:`EmbeddedBroker` and
:class:`BrokerOptions` load it on first use, so a client of a remote broker never pays for it.
"""

import importlib
from typing import TYPE_CHECKING, Any

from offsetstore import MessageQueue
from sdk._version import __version__ as __version__
from sdk.admin import Admin, AsyncAdmin
from sdk.consumer.membership import ConsumeFrom, MessageModel
from sdk.consumer.process_queue import FlowControlLimits
from sdk.consumer.pull import AsyncPullConsumer, PullConsumer
from sdk.consumer.push import AsyncPushConsumer, PushConsumer
from sdk.consumer.push_core import RebalanceListener
from sdk.errors import (
    ArgumentTypeError,
    BrokerUnavailableError,
    ClientClosedError,
    CloseError,
    IllegalStateError,
    InvalidArgumentError,
    InvalidMessageError,
    QuiverError,
    SendRejectedError,
    UnknownGroupError,
    UnknownTopicError,
)
from sdk.message import ConsumeResult, Message, ReceivedMessage, dlq_topic, retry_topic
from sdk.outgoing import SendReceipt, SendReceipts
from sdk.producer import AsyncProducer, Producer
from sdk.transaction import (
    AsyncTransactionalProducer,
    TransactionalProducer,
    TransactionReceipt,
    TransactionState,
)
from sdk.transport.remote_broker import RemoteBroker

if TYPE_CHECKING:
    from localstore.errors import StoreDirectoryError, StoreLockedError
    from sdk.broker.embedded import EmbeddedBroker
    from sdk.broker.service import BrokerOptions

# Names from store modules, imported on first use (PEP 562): the broker's load the store
# engine; the store's errors load only localstore.errors (pathlib and quiver_errors). The type
# checkers read the imports above; tests/test_architecture.py checks that ``import sdk`` loads
# no store module and that making an EmbeddedBroker does.
_LAZY_EXPORTS = {
    "BrokerOptions": "sdk.broker.service",
    "EmbeddedBroker": "sdk.broker.embedded",
    "StoreDirectoryError": "localstore.errors",
    "StoreLockedError": "localstore.errors",
}


def __getattr__(name: str) -> Any:
    module = _LAZY_EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'sdk' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY_EXPORTS})


__all__ = [
    "Admin",
    "ArgumentTypeError",
    "AsyncAdmin",
    "AsyncProducer",
    "AsyncPullConsumer",
    "AsyncPushConsumer",
    "AsyncTransactionalProducer",
    "BrokerOptions",
    "BrokerUnavailableError",
    "ClientClosedError",
    "CloseError",
    "ConsumeFrom",
    "ConsumeResult",
    "EmbeddedBroker",
    "FlowControlLimits",
    "IllegalStateError",
    "InvalidArgumentError",
    "InvalidMessageError",
    "Message",
    "MessageModel",
    "MessageQueue",
    "Producer",
    "PullConsumer",
    "PushConsumer",
    "QuiverError",
    "RebalanceListener",
    "ReceivedMessage",
    "RemoteBroker",
    "SendReceipt",
    "SendReceipts",
    "SendRejectedError",
    "StoreDirectoryError",
    "StoreLockedError",
    "TransactionReceipt",
    "TransactionState",
    "TransactionalProducer",
    "UnknownGroupError",
    "UnknownTopicError",
    "dlq_topic",
    "retry_topic",
]
