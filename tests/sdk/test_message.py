"""sdk.message and sdk.errors: the vocabulary producers and consumers share."""

from __future__ import annotations

from localstore import MessageStore, NewMessage
from sdk.errors import BrokerUnavailableError, InvalidMessageError, QuiverError, SendRejectedError
from sdk.message import RESERVED_PROPERTIES, ConsumeResult, Message, ReceivedMessage


def test_tags_and_keys_become_rocketmq_properties():
    message = Message("orders", b"{}", tags="paid", keys=["order-42", "user-7"])
    assert message.system_properties() == {"TAGS": "paid", "KEYS": "order-42 user-7"}
    assert Message("orders", b"{}").system_properties() == {}


def test_a_received_message_is_its_stored_record_with_system_properties_as_attributes(tmp_path):
    with MessageStore(tmp_path, commitlog_file_size=65536) as store:
        message = Message("orders", b"body", tags="paid", keys=["k1", "k2"])
        properties = {**message.system_properties(), "UNIQ_KEY": "ABC", "color": "red"}
        store.put(NewMessage(message.topic, message.body, 0, properties))
        [stored] = store.get_messages("orders", 0, 0).messages
    received = ReceivedMessage.from_stored(stored)
    assert (received.tags, received.keys, received.msg_id) == ("paid", ("k1", "k2"), "ABC")
    assert received.properties == {"color": "red"}
    assert received == ReceivedMessage.from_stored(stored.replace()) and received != stored
    assert "msg_id='ABC'" in repr(received) and "'color': 'red'" in repr(received)


def test_errors_say_whether_a_retry_may_help():
    assert BrokerUnavailableError().retriable
    assert not InvalidMessageError("empty body").retriable
    rejected = SendRejectedError("MESSAGE_ILLEGAL", "The specified topic is blank")
    assert not rejected.retriable and rejected.status == "MESSAGE_ILLEGAL"
    assert str(rejected) == "MESSAGE_ILLEGAL: The specified topic is blank"
    assert all(issubclass(e, QuiverError) for e in (InvalidMessageError, SendRejectedError))
    assert isinstance(InvalidMessageError("x"), ValueError)


def test_vocabulary():
    assert {"TAGS", "KEYS", "UNIQ_KEY", "DELAY"} <= RESERVED_PROPERTIES
    assert ConsumeResult.SUCCESS.value == "CONSUME_SUCCESS"
