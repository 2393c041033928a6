"""The CLI on names a store does not hold: an unknown topic or queue, a UNIQ_KEY in a store
without an index, a file given as the store. Each is a one-line error with a failing exit
status, never a success that reports nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from .test_cli import one_line_error, quiver

pytestmark = pytest.mark.integration


@pytest.fixture
def store(tmp_path: Path) -> Path:
    root = tmp_path / "data"
    assert quiver("store", "init", root).returncode == 0
    assert quiver("produce", "--data", root, "--topic", "M", "--body", "x").returncode == 0
    return root


def test_query_time_refuses_an_unknown_topic_or_queue(store):
    for topic, queue, words in (
        ("Nope", 0, ("topic Nope does not exist",)),
        ("M", 9, ("topic M has no queue 9", "4 read queues")),
    ):
        one_line_error(
            quiver("query", "time", "--data", store, "--topic", topic, "--queue", queue,
                   "--timestamp", 0, "--json"),
            1,
            *words,
        )  # fmt: skip
    answer = quiver(
        "query", "time", "--data", store, "--topic", "M", "--queue", 1, "--timestamp", 0
    )
    assert answer.returncode == 0, answer.stderr


def test_offsets_show_refuses_an_unknown_topic(store):
    one_line_error(
        quiver("offsets", "show", "--data", store, "--group", "g1", "--topic", "Nope", "--json"),
        1,
        "topic Nope does not exist",
    )


def test_a_json_query_that_finds_nothing_says_so_on_stderr(store):
    found = quiver("query", "key", "--data", store, "--topic", "M", "--key", "zz", "--json")
    assert found.returncode == 1 and found.stdout == ""
    assert "found no message of M with key zz" in found.stderr
    by_id = quiver("query", "id", "--data", store, "0" * 32, "--json")
    assert by_id.returncode == 1 and by_id.stdout == ""
    assert "no message has the id" in by_id.stderr


def test_query_id_of_a_uniq_key_needs_the_index(tmp_path):
    root = tmp_path / "plain"
    assert quiver("store", "init", root, "--no-index").returncode == 0
    sent = quiver("produce", "--data", root, "--topic", "T", "--body", "x", "--json")
    assert sent.returncode == 0, sent.stderr
    one_line_error(
        quiver("query", "id", "--data", root, "7F0000015B19302A568E730366200000"),
        1,
        "without an index",
    )


def test_a_file_is_not_a_store(tmp_path):
    path = tmp_path / "afile"
    path.write_text("")
    error = one_line_error(quiver("store", "info", path), 2, "is a file, not a store directory")
    assert "store init" not in error  # which would fail on a file too
