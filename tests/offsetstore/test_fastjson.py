"""offsetstore.fastjson: RocketMQ's fastjson dialect (real files and the reference's examples),
standard JSON, round trips of generated offset tables, and clear errors on garbage."""

from __future__ import annotations

import contextlib
import json
import tarfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from offsetstore import fastjson
from offsetstore.base import MessageQueue
from offsetstore.fastjson import FrozenObject

FIXTURE_TAR = Path(__file__).resolve().parents[1] / "fixtures" / "rocketmq-4.9.8" / "stores.tar.gz"
LONG_TOPIC = (
    "LongTopic_abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmnopqrstuvwxyz0123456789"
    "abcdefghijklmnopqrstuvwxyz0123456789abcdefghi"
)

# rocketmq-store.md section 9.2, verbatim: the client's offsets.json, pretty and compact.
CLIENT_PRETTY = (
    "{\n"
    '\t"offsetTable":{{\n'
    '\t\t\t"brokerName":"broker-a",\n'
    '\t\t\t"queueId":3,\n'
    '\t\t\t"topic":"TopicTest"\n'
    "\t\t}:1470,{\n"
    '\t\t\t"brokerName":"broker-a",\n'
    '\t\t\t"queueId":2,\n'
    '\t\t\t"topic":"TopicTest"\n'
    "\t\t}:1471\n"
    "\t}\n"
    "}"
)
CLIENT_COMPACT = '{"offsetTable":{{"brokerName":"broker-a","queueId":3,"topic":"TopicTest"}:1470}}'
# section 8: the broker's consumerOffset.json, 5.x shape.
BROKER_5X = """{
\t"dataVersion":{"counter":1448,"stateVersion":0,"timestamp":1736661762584},
\t"groupTopicMap":{"push_test":["%RETRY%push_test","test"]},
\t"lmqOffsetTable":{},
\t"offsetTable":{
\t\t"test@push_test":{0:165243,1:165245,2:165243,3:165242},
\t\t"%RETRY%push_test@push_test":{0:0}
\t}
}"""


def queue_key(topic: str, broker: str, queue_id: int) -> FrozenObject:
    return FrozenObject({"brokerName": broker, "queueId": queue_id, "topic": topic})


def test_rocketmq_4_9_8_consumer_offset_json(tmp_path: Path) -> None:
    with tarfile.open(FIXTURE_TAR) as tar:
        member = tar.extractfile("store/config/consumerOffset.json")
        assert member is not None
        extracted = tmp_path / "consumerOffset.json"
        extracted.write_bytes(member.read())
    raw = extracted.read_bytes()
    assert b"\t" in raw and b"{0:42," in raw  # really the dialect: tabs, unquoted int keys
    with pytest.raises(json.JSONDecodeError):
        json.loads(raw)
    table = fastjson.loads(raw)["offsetTable"]
    assert len(table) == 6
    assert table[f"{LONG_TOPIC}@quiver_group"] == {0: 42, 1: 41, 2: 41, 3: 41}
    assert table["TopicTest@quiver_group"] == {0: 42, 1: 42, 2: 41, 3: 41}
    assert table["TopicTest@other_group"] == {0: 84, 2: 83}
    assert table["%RETRY%quiver_group@other_group"] == {0: 84, 2: 83}
    assert all(isinstance(k, int) for offsets in table.values() for k in offsets)


def test_client_offsets_pretty_form() -> None:
    table = fastjson.loads(CLIENT_PRETTY)["offsetTable"]
    assert table == {
        queue_key("TopicTest", "broker-a", 3): 1470,
        queue_key("TopicTest", "broker-a", 2): 1471,
    }
    key = next(iter(table))
    assert isinstance(key, FrozenObject)
    assert MessageQueue(key["topic"], key["brokerName"], key["queueId"]) == MessageQueue(
        "TopicTest", "broker-a", 3
    )


def test_client_offsets_compact_form() -> None:
    assert fastjson.loads(CLIENT_COMPACT) == {
        "offsetTable": {queue_key("TopicTest", "broker-a", 3): 1470}
    }


def test_broker_5x_shape() -> None:
    document = fastjson.loads(BROKER_5X)
    assert document["dataVersion"]["counter"] == 1448
    assert document["groupTopicMap"] == {"push_test": ["%RETRY%push_test", "test"]}
    assert document["lmqOffsetTable"] == {}
    assert document["offsetTable"]["test@push_test"] == {0: 165243, 1: 165245, 2: 165243, 3: 165242}


def test_frozen_object_is_an_order_independent_hashable_mapping() -> None:
    a = fastjson.loads('{{"topic":"T","queueId":1,"tags":[1,{"x":2}]}:5}')
    b = fastjson.loads('{{"tags":[1,{"x":2}],"queueId":1,"topic":"T"}:6}')
    (key_a,) = a
    (key_b,) = b
    assert key_a == key_b and hash(key_a) == hash(key_b)
    assert key_a["tags"] == (1, FrozenObject({"x": 2}))
    assert dict(key_a) == {"queueId": 1, "tags": (1, FrozenObject({"x": 2})), "topic": "T"}
    assert key_a == {"queueId": 1, "tags": (1, FrozenObject({"x": 2})), "topic": "T"}
    assert len(key_a) == 3 and "topic" in key_a and "nope" not in key_a
    assert "FrozenObject(" in repr(key_a)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('"a\\"b\\\\c\\/\\b\\f\\n\\r\\t"', 'a"b\\c/\b\f\n\r\t'),
        ('"\\u00e9\\ud83d\\ude00"', "é😀"),
        ('"\\ud83d"', "\ud83d"),  # a lone surrogate, as Java may write
        ('"héllo"', "héllo"),
        (
            "[1, -0, 2.5, -1e3, 1E+2, true, false, null]",
            [1, 0, 2.5, -1000.0, 100.0, True, False, None],
        ),
        ("{}", {}),
        ("[]", []),
        ('\ufeff {"a" : [ ] }\n', {"a": []}),
        ("{true:1,null:2,1.5:3,-7:4}", {True: 1, None: 2, 1.5: 3, -7: 4}),
        ('{"a":1,"a":2}', {"a": 2}),
        ("9223372036854775807", 2**63 - 1),
    ],
)
def test_values(text: str, expected: Any) -> None:
    assert fastjson.loads(text) == expected


def test_bytes_input_and_bad_utf8() -> None:
    assert fastjson.loads('{"k":"é"}'.encode()) == {"k": "é"}
    with pytest.raises(ValueError, match="not UTF-8 at byte 6"):
        fastjson.loads(b'{"k":"\xff"}')


@pytest.mark.parametrize(
    ("garbage", "message"),
    [
        ("", "unexpected end of input at position 0"),
        ("{", "unexpected end of input at position 1"),
        ('{"a":1', "unexpected end of input at position 6"),
        ('{"a" 1}', "expected ':' after an object key at position 5"),
        ('{"a":1 "b":2}', "expected ',' or '}' in an object at position 7"),
        ("[1 2]", "expected ',' or ']' in an array at position 3"),
        ("[1,]", "unexpected character ']' at position 3"),
        ("{1:}", "unexpected character '}' at position 3"),
        ('"abc', "unterminated string at position 4"),
        ('"a\nb"', "control character in a string at position 2"),
        ('"\\x"', "invalid escape in a string at position 1"),
        ('"\\u12g4"', "invalid \\\\u escape at position 3"),
        ("01", "invalid number at position 0"),
        ("1.e5", "invalid number at position 0"),
        ("-", "invalid number at position 0"),
        ("1e999", "number out of range at position 0"),
        ("nul", "unexpected character 'n' at position 0"),
        ("NaN", "unexpected character 'N' at position 0"),
        ("{} {}", "unexpected data after the top-level value at position 3"),
        ("\x00\x00\x00", "unexpected character '\\\\x00' at position 0"),
        ('{\n\t"a":\n\t\t?}', r"position 10 \(line 3, column 3\)"),
    ],
)
def test_garbage_raises_value_error_with_position(garbage: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        fastjson.loads(garbage)


def test_deep_nesting_is_refused_not_a_recursion_error() -> None:
    with pytest.raises(ValueError, match="nesting deeper than"):
        fastjson.loads("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ValueError, match="nesting deeper than"):
        fastjson.loads("{" * 10_000)
    assert fastjson.loads("[" * 200 + "]" * 200) is not None


def test_every_truncation_of_a_file_is_an_error() -> None:
    for end in range(len(CLIENT_PRETTY) - 1):
        truncated = CLIENT_PRETTY[:end]
        with pytest.raises(ValueError):
            fastjson.loads(truncated)


def test_dumps_rejects_what_it_cannot_write() -> None:
    with pytest.raises(ValueError, match="cannot serialise"):
        fastjson.dumps([float("nan")])
    with pytest.raises(TypeError, match="map key of type bytes"):
        fastjson.dumps({b"k": 1})


# --- property tests ---------------------------------------------------------------------------

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)
json_values = st.recursive(
    json_scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(), children, max_size=4)
    ),
    max_leaves=20,
)


@given(json_values, st.booleans(), st.booleans())
@settings(max_examples=200, deadline=None)
def test_standard_json_reads_like_the_json_module(value: Any, indent: bool, ascii_: bool) -> None:
    text = json.dumps(value, indent="\t" if indent else None, ensure_ascii=ascii_)
    assert fastjson.loads(text) == json.loads(text)


@given(st.text(max_size=60))
@settings(max_examples=300, deadline=None)
def test_arbitrary_text_parses_or_raises_value_error(text: str) -> None:
    with contextlib.suppress(ValueError):  # anything else (IndexError, ...) fails the test
        fastjson.loads(text)


names = st.text(alphabet=st.characters(codec="utf-8"), min_size=1, max_size=20)
queues = st.builds(MessageQueue, names, names, st.integers(min_value=0, max_value=2**31 - 1))
offset_tables = st.dictionaries(queues, st.integers(min_value=0, max_value=2**63 - 1), max_size=12)


@given(offset_tables, st.booleans())
@settings(max_examples=200, deadline=None)
def test_client_shape_round_trip(table: dict[MessageQueue, int], pretty: bool) -> None:
    """RocketMQ client shape: {"offsetTable": {{brokerName, queueId, topic}: offset}}."""
    document = {
        "offsetTable": {
            FrozenObject({"brokerName": q.broker_name, "queueId": q.queue_id, "topic": q.topic}): o
            for q, o in table.items()
        }
    }
    text = fastjson.dumps(document, pretty=pretty)
    assert ("\t" in text) == pretty
    parsed = fastjson.loads(text)["offsetTable"]
    back = {MessageQueue(k["topic"], k["brokerName"], k["queueId"]): v for k, v in parsed.items()}
    assert back == table


@given(
    st.dictionaries(
        names, st.dictionaries(st.integers(0, 2**31 - 1), st.integers(0, 2**63 - 1)), max_size=6
    ),
    st.booleans(),
)
@settings(max_examples=200, deadline=None)
def test_broker_shape_round_trip(table: dict[str, dict[int, int]], pretty: bool) -> None:
    """Broker shape: {"offsetTable": {"topic@group": {queueId: offset}}} (bare int keys)."""
    text = fastjson.dumps({"offsetTable": table}, pretty=pretty)
    assert fastjson.loads(text) == {"offsetTable": table}
