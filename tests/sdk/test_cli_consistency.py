"""Every ``quiver`` command behaves alike: ``--data DIR`` (or, for the commands that work on a
running broker, ``--broker URL``: exactly one), ``--json`` errors, a progress line.

The command list is walked from the parser itself, so a command added later is covered without
touching this file. Parsing and error reporting run in-process through ``main`` (the code path
of the real program); the progress line needs a real terminal, so those tests run ``quiver`` as
a subprocess whose stderr is a pseudo-terminal.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from sdk.cli.common import UsageError
from sdk.cli.main import build_parser, main

from .test_cli import REPO, quiver

pytestmark = pytest.mark.integration

EXIT_FAILED = 1
EXIT_USAGE = 2
PTY_TIMEOUT_S = 120.0


def leaf_commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> Iterator[
    tuple[tuple[str, ...], argparse.ArgumentParser]
]:  # fmt: skip
    """Every runnable command (a parser with no sub-commands) under ``parser``, with its path."""
    groups = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not groups:
        yield path, parser
    for group in groups:
        for name, child in group.choices.items():
            yield from leaf_commands(child, (*path, name))


LEAVES = dict(leaf_commands(build_parser("perf")))
STORE_LEAVES = [path for path in LEAVES if path[0] == "store"]
BROKER_GROUPS = {"produce", "read", "query", "offsets", "group", "topic"}
"""The commands that take ``--broker URL`` in place of ``--data DIR``."""
BROKER_LEAVES = [path for path in LEAVES if path[0] in BROKER_GROUPS]
URL = "http://127.0.0.1:9"


def test_the_walk_finds_the_commands():
    for known in (("store", "info"), ("store", "verify"), ("read",), ("query", "time")):
        assert known in LEAVES
    assert len(LEAVES) >= 10


@pytest.mark.parametrize("path", list(LEAVES), ids=" ".join)
def test_every_command_takes_data_json_and_quiet(path, tmp_path):
    options = {option for action in LEAVES[path]._actions for option in action.option_strings}
    assert {"--data", "--json", "--quiet"} <= options, options
    directory = str(tmp_path / "store")
    try:
        args = build_parser(path[0]).parse_args([*path, "--data", directory, "--json"])
    except UsageError as exc:  # another required argument is missing, never --data
        assert "--data" not in exc.message and "DIR" not in exc.message, exc.message
    else:
        assert str(args.data) == directory


def error_of(capsys: pytest.CaptureFixture[str], argv: list[str], status: int) -> dict[str, str]:
    """Run ``main(argv)``: it exits with ``status``, prints nothing on stdout and one JSON
    error object on stderr, which is returned."""
    assert main(argv) == status
    out, err = capsys.readouterr()
    assert out == ""
    (line,) = err.splitlines()
    document = json.loads(line)
    assert set(document) == {"error", "detail"}, document
    assert document["detail"] and "\n" not in document["detail"]
    return document


@pytest.mark.parametrize("path", list(LEAVES), ids=" ".join)
def test_a_usage_error_of_every_command_is_json_with_json(path, tmp_path, capsys):
    argv = [*path, "--data", str(tmp_path / "store"), "--json", "--no-such-option"]
    document = error_of(capsys, argv, EXIT_USAGE)
    assert document["error"] == "usage"
    assert document["detail"].endswith(f"(see: quiver {' '.join(path)} --help)") or (
        "unrecognized arguments: --no-such-option" in document["detail"]
    )  # a missing required argument is reported first, by the command's own parser


def test_a_usage_error_without_json_stays_one_human_line(tmp_path, capsys):
    assert main(["read", "--data", str(tmp_path), "--topic", "T", "--no-such-option"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("quiver: error: unrecognized arguments: --no-such-option")
    assert "{" not in err


@pytest.fixture
def store(tmp_path: Path) -> Path:
    root = tmp_path / "data"
    assert quiver("store", "init", "--data", root, "--commitlog-file-size", "64K").returncode == 0
    assert quiver("produce", "--data", root, "--topic", "T", "--body", "x").returncode == 0
    return root


def test_operation_errors_are_json_with_the_exception_kind(store, capsys):
    unknown = error_of(capsys, ["read", "--data", str(store), "--topic", "Nope", "--json"], 1)
    assert unknown == {"error": "failed", "detail": f"topic Nope does not exist in store {store}"}
    (store / "a_file").write_bytes(b"")
    under_a_file = ["store", "init", "--data", str(store / "a_file" / "store"), "--json"]
    refused = error_of(capsys, under_a_file, EXIT_FAILED)
    assert refused["error"] == "StoreDirectoryError" and "cannot be created" in refused["detail"]
    missing = error_of(capsys, ["store", "info", "--data", str(store / "none"), "--json"], 2)
    assert missing["error"] == "usage" and "does not exist" in missing["detail"]


def test_operation_error_as_json_from_a_real_process(store):
    done = quiver("query", "time", "--data", store, "--topic", "T", "--queue", 9,
                  "--timestamp", 0, "--json")  # fmt: skip
    assert done.returncode == EXIT_FAILED and done.stdout == ""
    assert json.loads(done.stderr) == {
        "error": "failed",
        "detail": "topic T has no queue 9 (it has 4 read queues)",
    }


@pytest.mark.parametrize("path", STORE_LEAVES, ids=" ".join)
def test_store_commands_take_dir_as_positional_or_data_not_both_nor_neither(path, store, capsys):
    for argv in ([*path, str(store), "--json"], [*path, "--data", str(store), "--json"]):
        assert main(argv) == 0, capsys.readouterr()
        out, _ = capsys.readouterr()
        assert json.loads(out.splitlines()[0])
    both = error_of(capsys, [*path, str(store), "--data", str(store), "--json"], EXIT_USAGE)
    assert both["error"] == "usage" and "given twice" in both["detail"]
    neither = error_of(capsys, [*path, "--json"], EXIT_USAGE)
    assert neither["error"] == "usage" and "missing: give --data DIR" in neither["detail"]
    assert main([*path]) == EXIT_USAGE
    out, err = capsys.readouterr()
    assert out == "" and err.startswith(f"quiver {' '.join(path)}: error: the store directory")


def options_of(path: tuple[str, ...]) -> set[str]:
    return {option for action in LEAVES[path]._actions for option in action.option_strings}


def test_exactly_the_commands_that_work_on_a_running_broker_take_broker():
    assert {path[0] for path in BROKER_LEAVES} == BROKER_GROUPS
    for path in LEAVES:
        if path[0] == "perf":  # a benchmark's --broker names what it measures, not a store
            continue
        assert ("--broker" in options_of(path)) == (path in BROKER_LEAVES), path
    assert ("store", "verify") in LEAVES and "--broker" not in options_of(("store", "verify"))


@pytest.mark.parametrize("path", BROKER_LEAVES, ids=" ".join)
def test_broker_is_read_as_a_url_in_place_of_data(path):
    try:
        args = build_parser(path[0]).parse_args([*path, "--broker", URL + "/", "--json"])
    except UsageError as exc:  # another required argument is missing, never the target
        assert "--data" not in exc.message and "--broker" not in exc.message, exc.message
    else:
        assert (args.broker, args.data) == (URL, None)


@pytest.mark.parametrize("path", BROKER_LEAVES, ids=" ".join)
def test_data_and_broker_both_or_neither_is_a_usage_error_naming_both(path, tmp_path, capsys):
    both = [*path, "--data", str(tmp_path), "--broker", URL, "--json"]
    for argv in (both, [*path, "--json"]):
        document = error_of(capsys, argv, EXIT_USAGE)
        assert document["error"] == "usage"
        if "--data" in document["detail"]:  # else another required argument was named first
            assert "--broker" in document["detail"], document


def test_neither_data_nor_broker_names_both(capsys):
    document = error_of(capsys, ["topic", "list", "--json"], EXIT_USAGE)
    assert "one of the arguments --data --broker is required" in document["detail"]


def test_a_broker_that_is_no_http_url_is_a_usage_error(capsys):
    for bad in ("127.0.0.1:8080", "ftp://host", "http://", "http://host:port", "http://host:0"):
        document = error_of(capsys, ["topic", "list", "--broker", bad, "--json"], EXIT_USAGE)
        assert "not a broker URL" in document["detail"], document


def run_on_a_terminal(*args: str, tmp_path: Path) -> tuple[int, str]:
    """Run ``quiver ARGS`` with stderr on a pseudo-terminal (stdout to a file); its exit status
    and what it wrote on the terminal."""
    master, slave = os.openpty()
    with (tmp_path / "stdout").open("wb") as stdout:
        process = subprocess.Popen(
            [sys.executable, "-m", "sdk.cli.main", *args],
            cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO)},
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=slave,
        )
    os.close(slave)
    written = bytearray()
    try:
        while True:
            ready, _, _ = select.select([master], [], [], PTY_TIMEOUT_S)
            assert ready, "quiver wrote nothing and did not exit"
            try:
                chunk = os.read(master, 4096)
            except OSError:  # EIO: the child closed the terminal (it exited)
                break
            if not chunk:
                break
            written += chunk
    finally:
        os.close(master)
        status = process.wait(timeout=PTY_TIMEOUT_S)
    return status, written.decode()


def test_long_commands_draw_progress_on_a_terminal(store, tmp_path):
    status, terminal = run_on_a_terminal("store", "verify", str(store), tmp_path=tmp_path)
    assert status == 0
    assert "quiver: verifying commitlog bytes: 0/" in terminal
    assert terminal.endswith("\r\033[K")  # the line is erased when the command ends
    status, terminal = run_on_a_terminal(
        "read", "--data", str(store), "--topic", "T", tmp_path=tmp_path
    )
    assert status == 0
    assert "quiver: read messages: 1/1 (100%)" in terminal
    assert (tmp_path / "stdout").read_text().startswith("T/")  # results unchanged on stdout


@pytest.mark.parametrize("flag", ["--json", "--quiet"])
def test_no_progress_with_json_or_quiet(store, tmp_path, flag):
    status, terminal = run_on_a_terminal("store", "verify", str(store), flag, tmp_path=tmp_path)
    assert status == 0
    assert terminal == ""


def test_no_progress_when_stderr_is_not_a_terminal(store):
    done = quiver("store", "verify", store)
    assert done.returncode == 0
    assert done.stderr == ""
    done = quiver("read", "--data", store, "--topic", "T")
    assert done.returncode == 0 and done.stderr == ""
