"""sdk: what applications import: producers, consumers and brokers.

    from sdk import EmbeddedBroker, Producer, PushConsumer, Message, ConsumeResult

    with EmbeddedBroker("./data") as broker:
        with Producer(broker) as producer:
            producer.send(Message("orders", b"...", tags="paid", keys=["order-42"]))

Importing ``sdk`` never imports the CLI, aiohttp's server side or pyspark.
"""

from offsetstore import MessageQueue
from sdk._version import __version__ as __version__
from sdk.broker.embedded import EmbeddedBroker
from sdk.broker.service import BrokerOptions
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

__all__ = [
    "ArgumentTypeError",
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
    "SendReceipt",
    "SendReceipts",
    "SendRejectedError",
    "TransactionReceipt",
    "TransactionState",
    "TransactionalProducer",
    "dlq_topic",
    "retry_topic",
]
