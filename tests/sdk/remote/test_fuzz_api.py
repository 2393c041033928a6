"""The broker's HTTP API, fuzzed against a real broker process: whatever a client sends, the
broker answers a 2xx or a 4xx error answer ``{code, message, retriable}`` naming the problem,
never a 5xx, and keeps serving.

Two sources of requests. Schemathesis reads the broker's own ``GET /openapi.json`` and
generates, for every operation, requests that follow the document (positive) and requests
that break it (negative). Hypothesis then goes where the document does not: random and
mutated produce bodies and random query strings to the binary routes, and arbitrary JSON (not
only schema-valid JSON) to every route. Every run is derandomized, so CI sees the same cases
each time, and bounded, so the module stays well under a minute on two cores.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode

from localstore.record.codec import NewMessage
from sdk.protocol.data_plane import send_query
from sdk.protocol.produce_body import encode_produce_body
from sdk.protocol.send_many import encode_send_many_body
from sdk.server.openapi import openapi_document
from sdk.transport.models import CONSUME_FROM_RULES
from tests.sdk.remote.broker_process import BrokerProcess

pytestmark = [pytest.mark.integration, pytest.mark.slow]

_DOCUMENT = openapi_document(64 * 1024)
OPERATIONS = [(path, method) for path, item in _DOCUMENT["paths"].items() for method in item]
POST_ROUTES = [path for path, method in OPERATIONS if method == "post"]


def _breakable(path: str, method: str) -> bool:
    """Whether the document says enough of an operation's input for schemathesis to break it:
    query parameters or a JSON body (an opaque binary body, as send-many's, has no schema to
    break: the mutated-body test below fuzzes it)."""
    operation = _DOCUMENT["paths"][path][method]
    content = operation.get("requestBody", {}).get("content", {})
    return bool(operation.get("parameters")) or "application/json" in content


# (operation, mode): every operation with valid input; those that take input with invalid too
CASES = [
    (path, method, mode)
    for path, method in OPERATIONS
    for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
    if mode is GenerationMode.POSITIVE or (method == "post" and _breakable(path, method))
]
TOPIC = "fuzzed"
BROKER_NAME = "broker-a"  # BrokerProcess's default

# a long poll holds its request up to wait_ms (the broker caps it at 30 s): not what is fuzzed
MAX_WAIT_MS = 50
FUZZ = settings(
    max_examples=25,
    deadline=None,
    derandomize=True,
    database=None,
    # no shrinking: the failing request is in the assertion's message, and shrinking against a
    # live server can take minutes
    phases=[Phase.explicit, Phase.generate],
    # the strategies are schemathesis' and hypothesis' own; a slow or filtered one is not a bug
    suppress_health_check=list(HealthCheck),
)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    root = tmp_path_factory.mktemp("fuzz")
    with BrokerProcess(root / "data", max_request_bytes=64 * 1024) as process:
        with httpx.Client(base_url=process.url, timeout=30.0) as http:
            created = http.post(
                "/v1/create-topic", json={"name": TOPIC, "queue_count": 4, "perm": 6}
            )
            assert created.status_code == 200, created.text
        yield process
        _assert_serving(process)
        assert process.stop() == 0, process.log()
    # whatever the fuzzing stored, the broker starts again on it (its files still load)
    with BrokerProcess(root / "data") as again:
        _assert_serving(again)
        assert again.stop() == 0, again.log()


@pytest.fixture(scope="module")
def http(broker: BrokerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=broker.url, timeout=30.0) as client:
        yield client


@pytest.fixture(scope="module")
def api_schema(broker: BrokerProcess) -> Any:
    return schemathesis.openapi.from_url(broker.url + "/openapi.json", timeout=30)


def _steer(body: dict[str, Any]) -> None:
    """Keep a generated body's long poll short, name this broker where a body or its queues
    name one (else every offset call stops at "queue of another broker" and never reaches the
    store), and make half the ``consume_from`` strings a rule that exists (else no start is
    ever worked out)."""
    if type(body.get("wait_ms")) is int:
        body["wait_ms"] = min(body["wait_ms"], MAX_WAIT_MS)
    if isinstance(body.get("broker_name"), str):
        body["broker_name"] = BROKER_NAME
    for queue in body.get("queues") if isinstance(body.get("queues"), list) else ():
        if isinstance(queue, list) and len(queue) == 3 and isinstance(queue[1], str):
            queue[1] = BROKER_NAME  # [topic, broker_name, queue_id]
    rule = body.get("consume_from")
    if isinstance(rule, str) and len(rule) % 2 == 0:  # half of them a rule that exists
        body["consume_from"] = sorted(CONSUME_FROM_RULES)[len(rule) % 3]


def _assert_serving(broker: BrokerProcess) -> None:
    assert broker.process.poll() is None, f"the broker died: {broker.log()}"
    assert httpx.get(broker.url + "/health", timeout=30.0).status_code == 200


def _assert_answered(status: int, content_type: str, body: bytes, request: str) -> None:
    """A 2xx, or a 4xx error answer that names the problem; never a 5xx."""
    assert status < 500, f"{request} -> {status} {body[:300]!r}"
    if status == 200:
        return
    assert content_type.startswith("application/json"), f"{request} -> {status} {body[:300]!r}"
    error = orjson.loads(body)
    assert isinstance(error.get("code"), str) and error["code"], error
    assert isinstance(error.get("message"), str) and error["message"], error
    assert isinstance(error.get("retriable"), bool), error


def _check(answer: httpx.Response, request: str) -> None:
    _assert_answered(
        answer.status_code, answer.headers.get("content-type", ""), answer.content, request
    )


# -- from the OpenAPI document ----------------------------------------------------------------
def test_the_served_document_is_valid_openapi_and_lists_every_route(api_schema: Any) -> None:
    api_schema.validate()  # against the OpenAPI 3.0 schema; raises naming the first problem
    assert api_schema.raw_schema["openapi"] == "3.0.3"
    assert api_schema.raw_schema["paths"].keys() == _DOCUMENT["paths"].keys()


@pytest.mark.parametrize(("path", "method", "mode"), CASES)
def test_every_operation_answers_generated_requests_without_a_server_error(
    api_schema: Any, broker: BrokerProcess, path: str, method: str, mode: GenerationMode
) -> None:
    operation = api_schema[path][method.upper()]
    session = requests.Session()

    @FUZZ
    @given(case=operation.as_strategy(mode))
    def request(case: Any) -> None:
        if isinstance(case.body, dict):
            _steer(case.body)
        answer = case.call(base_url=broker.url, session=session, timeout=30)
        _assert_answered(
            answer.status_code,
            answer.headers.get("content-type", [""])[0],
            answer.content,
            f"{method.upper()} {path} query={case.query!r} body={case.body!r:.300}",
        )

    with session:
        request()
    _assert_serving(broker)


# -- beyond the document: binary bodies, query strings, any JSON --------------------------------
def _batch(count: int = 3) -> list[NewMessage]:
    return [
        NewMessage(TOPIC, f"body-{i}".encode(), 0, {"UNIQ_KEY": uuid.uuid4().hex, "TAGS": "t"})
        for i in range(count)
    ]


_BATCH = _batch()
_VALID_BODY = encode_produce_body(_BATCH)
_VALID_QUERY = send_query(_BATCH)


@st.composite
def _mutated(draw: st.DrawFn, body: bytes) -> bytes:
    """``body`` with a few bytes overwritten, cut, or spliced in."""
    data = bytearray(body)
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["overwrite", "truncate", "insert", "int32"]))
        at = draw(st.integers(0, max(len(data) - 1, 0)))
        if kind == "overwrite" and data:
            data[at] = draw(st.integers(0, 255))
        elif kind == "truncate":
            del data[at:]
        elif kind == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=8))
        else:  # a size or flag field set to an edge value
            value = draw(st.sampled_from([0, 1, -1, 2**31 - 1, -(2**31), 0x7FFF, 0xFFFF]))
            data[at : at + 4] = value.to_bytes(4, "big", signed=True)
    return bytes(data)


@pytest.mark.parametrize("route", ["/v1/send", "/v1/send-half"])
@FUZZ
@given(body=st.binary(max_size=512) | _mutated(_VALID_BODY))
def test_random_and_mutated_produce_bodies_are_refused_or_stored(
    http: httpx.Client, route: str, body: bytes
) -> None:
    query = {**_VALID_QUERY, "group": "fuzz-producers"}
    if route == "/v1/send-half":
        query["count"] = "1"
    answer = http.post(
        route, params=query, content=body, headers={"content-type": "application/octet-stream"}
    )
    _check(answer, f"POST {route} body={body!r:.300}")


_VALID_SEND_MANY = encode_send_many_body(
    [(_VALID_QUERY, _VALID_BODY), ({**_VALID_QUERY, "producer": "p", "sequence": "1"}, _VALID_BODY)]
)


@FUZZ
@given(body=st.binary(max_size=512) | _mutated(_VALID_SEND_MANY))
def test_random_and_mutated_send_many_bodies_are_refused_or_answered(
    http: httpx.Client, body: bytes
) -> None:
    answer = http.post(
        "/v1/send-many", content=body, headers={"content-type": "application/octet-stream"}
    )
    _check(answer, f"POST /v1/send-many body={body!r:.300}")
    if answer.status_code == 200:  # a part's refusal is an error answer of its own
        for item in orjson.loads(answer.content):
            if "error" in item:
                assert 400 <= item["http_status"] < 500, item
                _assert_answered(
                    item["http_status"], "application/json", orjson.dumps(item["error"]), "part"
                )


_QUERY_VALUES = st.one_of(
    st.text(max_size=30),
    st.integers(-(2**70), 2**70).map(str),
    st.sampled_from(["", "-0", "+1", " 1", "1e3", "0x10", "٣", "nan", TOPIC, "00" * 8]),
)


@pytest.mark.parametrize("route", ["/v1/send", "/v1/send-half"])
@FUZZ
@given(
    changes=st.dictionaries(
        st.sampled_from([*_VALID_QUERY, "group", "producer", "sequence"]) | st.text(max_size=10),
        _QUERY_VALUES | st.none(),
        max_size=5,
    )
)
def test_random_query_strings_are_refused_or_stored(
    http: httpx.Client, route: str, changes: dict[str, str | None]
) -> None:
    query = {**_VALID_QUERY, "group": "fuzz-producers"}
    for name, value in changes.items():
        if value is None:
            query.pop(name, None)
        else:
            query[name] = value
    answer = http.post(
        route,
        params=query,
        content=_VALID_BODY,
        headers={"content-type": "application/octet-stream"},
    )
    _check(answer, f"POST {route} query={query!r}")


_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**64 - 1),  # what orjson writes
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=20),
    st.sampled_from([TOPIC, "broker-a", "CLUSTERING", "earliest", "COMMIT", "*"]),
)
_JSON = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=12), inner),
    max_leaves=12,
)


def _field_names(path: str) -> list[str]:
    body = _DOCUMENT["paths"][path]["post"].get("requestBody", {})
    schema = body.get("content", {}).get("application/json", {}).get("schema", {})
    return list(schema.get("properties", {})) or ["x"]


@pytest.mark.parametrize("route", POST_ROUTES)
@FUZZ
@given(data=st.data())
def test_any_json_to_any_route_is_refused_or_answered(
    http: httpx.Client, route: str, data: st.DataObject
) -> None:
    # half of the bodies are objects with the route's own field names, so the values reach
    # the service rather than stopping at "not an object"
    names = st.sampled_from(_field_names(route)) | st.text(max_size=8)
    document = data.draw(_JSON | st.dictionaries(names, _JSON, max_size=6))
    if isinstance(document, dict):
        _steer(document)
    answer = http.post(route, content=orjson.dumps(document, option=orjson.OPT_NON_STR_KEYS))
    _check(answer, f"POST {route} body={document!r:.300}")


_NAMES = st.text(max_size=6) | st.sampled_from(["", TOPIC, "g", "@"])


@FUZZ
@given(
    group=_NAMES,
    offsets=st.lists(
        st.tuples(_NAMES, st.integers(0, 2**31 - 1), st.integers(0, 2**63 - 1)), max_size=3
    ),
)
def test_offset_commits_of_any_names_are_refused_or_kept(
    http: httpx.Client, group: str, offsets: list[tuple[str, int, int]]
) -> None:
    # the document cannot say [topic, broker_name, queue_id, offset] position by position
    # (OpenAPI 3.0 has no tuples), so these well-formed commits reach the offset table here;
    # the module's broker must start again on whatever they left in its offset file
    body = {
        "broker_name": BROKER_NAME,
        "group": group,
        "offsets": [[topic, BROKER_NAME, queue_id, offset] for topic, queue_id, offset in offsets],
    }
    _check(http.post("/v1/commit-offsets", json=body), f"POST /v1/commit-offsets {body!r}")


@pytest.mark.parametrize(("group", "topic"), [("", TOPIC), ("g", "")])
def test_an_offset_commit_with_an_empty_name_is_refused_and_the_broker_restarts(
    tmp_path: Path, group: str, topic: str
) -> None:
    body = {"broker_name": BROKER_NAME, "group": group, "offsets": [[topic, BROKER_NAME, 0, 5]]}
    with BrokerProcess(tmp_path / "data") as broker:
        answer = httpx.post(broker.url + "/v1/commit-offsets", json=body, timeout=30.0)
        assert answer.status_code == 400, answer.text
        assert "must not be empty" in answer.json()["message"]
        assert broker.stop() == 0, broker.log()
    with BrokerProcess(tmp_path / "data") as again:  # the offset file still loads
        _assert_serving(again)


@pytest.mark.parametrize(
    ("group", "client_id", "message_model", "problem"),
    [
        ("", "c", "CLUSTERING", "bad group name"),
        ("g@x", "c", "CLUSTERING", "bad group name"),
        ("g", "", "CLUSTERING", "client id"),
        ("g", "c", "BOGUS", "message model"),
    ],
)
def test_a_heartbeat_the_group_table_cannot_describe_is_refused(
    http: httpx.Client, group: str, client_id: str, message_model: str, problem: str
) -> None:
    body = {"group": group, "client_id": client_id, "subscriptions": {}}
    answer = http.post("/v1/heartbeat", json={**body, "message_model": message_model})
    assert answer.status_code == 400, answer.text
    assert problem in answer.json()["message"]
