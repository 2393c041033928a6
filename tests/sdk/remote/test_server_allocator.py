"""The broker process keeps large buffers mapped on their own (:mod:`sdk.server.allocator`): a
buffer freed goes back to the system, so freed request bodies leave no holes in the heap."""

from __future__ import annotations

import ctypes
import os
import platform
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from sdk.cli import broker_cmd
from sdk.cli.main import main
from sdk.server import allocator

REPO = Path(__file__).resolve().parents[3]
GLIBC_WITH_MALLINFO2 = (
    platform.system() == "Linux"
    and platform.libc_ver()[0] == "glibc"
    and hasattr(ctypes.CDLL(None), "mallinfo2")
)

# After a freed 8 MiB buffer (glibc's own rule then raises its threshold to 8 MiB), how much
# do sixteen 256 KiB buffers grow the heap (mallinfo2's arena: bytes taken with sbrk)? Mapped
# on their own, not at all. A fresh interpreter: the setting does not reach the test's own.
_PROBE = textwrap.dedent(
    """
    import ctypes, sys
    from sdk.server.allocator import keep_large_buffers_mapped

    class MallInfo2(ctypes.Structure):
        _fields_ = [(name, ctypes.c_size_t) for name in (
            "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
            "uordblks", "fordblks", "keepcost")]

    mallinfo2 = ctypes.CDLL(None).mallinfo2
    mallinfo2.restype = MallInfo2
    if sys.argv[1] == "set":
        assert keep_large_buffers_mapped()
    large = bytearray(8 << 20)
    del large
    before = mallinfo2().arena
    buffers = [bytearray(256 << 10) for _ in range(16)]
    print(mallinfo2().arena - before)
    """
)


def _heap_growth_bytes(mode: str) -> int:
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith("MALLOC_") and name not in ("GLIBC_TUNABLES", "LD_PRELOAD")
    }
    env["PYTHONPATH"] = str(REPO)
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, mode],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    return int(done.stdout)


@pytest.mark.skipif(not GLIBC_WITH_MALLINFO2, reason="glibc 2.33+ only")
def test_large_buffers_are_mapped_on_their_own_once_the_threshold_is_set() -> None:
    assert _heap_growth_bytes("set") < 256 << 10  # at most glibc's top padding


@pytest.mark.skipif(not GLIBC_WITH_MALLINFO2, reason="glibc 2.33+ only")
def test_without_it_glibc_takes_them_from_the_heap() -> None:
    """What the setting prevents: glibc's own rule serves them from the heap."""
    assert _heap_growth_bytes("default") >= 2 << 20


def test_an_allocator_tuned_by_the_environment_is_left_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MALLOC_ARENA_MAX", "2")
    assert not allocator.keep_large_buffers_mapped()
    monkeypatch.delenv("MALLOC_ARENA_MAX")
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.mmap_threshold=65536")
    assert not allocator.keep_large_buffers_mapped()


def test_quiver_broker_sets_it_for_its_process(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    calls: list[str] = []
    monkeypatch.setattr(broker_cmd, "keep_large_buffers_mapped", lambda: calls.append("set"))
    monkeypatch.setattr(broker_cmd.event_loop, "run", lambda *_args: calls.append("serve"))
    assert main(["broker", "--data", str(tmp_path / "data"), "--create", "--quiet"]) == 0
    assert calls == ["set", "serve"]
