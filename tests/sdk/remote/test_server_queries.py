"""The broker server's query routes, spoken by hand (httpx and the protocol's encoders) to a
real broker process: by key and by id the answer is the stored records, and bad input a 400."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import httpx
import pytest

from localstore.record.codec import NewMessage
from sdk.errors import InvalidArgumentError
from sdk.protocol.calls import CALLS
from sdk.protocol.data_plane import decode_records_answer, send_query
from sdk.protocol.errors import error_from_answer
from sdk.protocol.produce_body import encode_produce_body
from tests.sdk.remote.broker_process import BrokerProcess

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def http(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    root = tmp_path_factory.mktemp("queries")
    with (
        BrokerProcess(root / "data") as broker,
        httpx.Client(base_url=broker.url, timeout=30.0) as client,
    ):
        yield client


def _post(http: httpx.Client, call: str, *args: object, **kwargs: object) -> httpx.Response:
    request = CALLS[call].request(args, kwargs, None)
    return http.post(request.path, content=request.body)


def test_a_stored_message_is_found_by_key_and_by_both_ids(http: httpx.Client) -> None:
    uniq = uuid.uuid4().hex.upper()
    message = NewMessage("q-orders", b"paid", 0, {"UNIQ_KEY": uniq, "KEYS": "order-7"})
    sent = http.post(
        "/v1/send", params=send_query([message]), content=encode_produce_body([message])
    )
    assert sent.status_code == 200, sent.text
    by_key = _post(http, "query_by_key", "q-orders", "order-7", max_count=5)
    assert by_key.status_code == 200, by_key.text
    assert by_key.headers["content-type"] == "application/octet-stream"
    (found,) = decode_records_answer(by_key.content).messages()
    assert (found.body, found.msg_id) == (b"paid", uniq)
    for message_id in (uniq, found.offset_msg_id):
        answer = _post(http, "query_by_id", message_id)
        assert answer.status_code == 200, answer.text
        assert [m.body for m in CALLS["query_by_id"].answer(answer.content).messages()] == [b"paid"]
    none = _post(http, "query_by_key", "q-orders", "order-8")
    assert decode_records_answer(none.content).count == 0


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/query-by-key", b'{"topic": "t"}'),
        ("/v1/query-by-key", b'{"topic": "t", "key": "k", "max_count": 0}'),
        ("/v1/query-by-key", b'{"topic": "t", "key": "k", "begin_ms": 5, "end_ms": 4}'),
        ("/v1/query-by-key", b"not json"),
        ("/v1/query-by-id", b'{"message_id": 7}'),
        ("/v1/query-by-id", b'{"message_id": ""}'),
    ],
)
def test_bad_queries_are_a_400_naming_the_problem(
    http: httpx.Client, path: str, body: bytes
) -> None:
    answer = http.post(path, content=body)
    assert answer.status_code == 400, answer.text
    error = error_from_answer(answer.status_code, answer.content)
    assert isinstance(error, InvalidArgumentError) and str(error)


def test_the_openapi_document_describes_the_query_routes(http: httpx.Client) -> None:
    paths = http.get("/openapi.json").json()["paths"]
    assert paths["/v1/query-by-key"]["post"]["operationId"] == "query_by_key"
    assert paths["/v1/query-by-id"]["post"]["requestBody"]["content"]["application/json"]
