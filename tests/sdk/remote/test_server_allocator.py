"""The broker process keeps large buffers mapped on their own (:mod:`sdk.server.allocator`): a
buffer freed goes back to the system, so freed request bodies leave no holes in the heap."""

from __future__ import annotations

import platform
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc",
    reason="glibc's malloc only",
)

# After a large buffer is freed, do four 256 KiB buffers grow the heap (/proc/self/maps), or
# is each a mapping of its own? A fresh interpreter: the setting does not reach the test's.
_PROBE = textwrap.dedent(
    """
    import sys
    from sdk.server.allocator import keep_large_buffers_mapped

    def heap_bytes():
        with open("/proc/self/maps") as maps:
            for line in maps:
                if line.rstrip().endswith("[heap]"):
                    start, end = line.split()[0].split("-")
                    return int(end, 16) - int(start, 16)
        return 0

    if sys.argv[1] == "fixed":
        assert keep_large_buffers_mapped()
    large = bytearray(8 << 20)
    del large  # glibc's own rule would now raise its threshold to 8 MiB
    before = heap_bytes()
    buffers = [bytearray(256 << 10) for _ in range(4)]
    print(heap_bytes() - before)
    """
)


def _heap_growth_bytes(mode: str) -> int:
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, mode],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return int(done.stdout)


def test_large_buffers_leave_the_heap_alone_once_the_threshold_is_fixed() -> None:
    assert _heap_growth_bytes("fixed") < 256 << 10


def test_without_it_glibc_serves_them_from_the_heap() -> None:
    """The probe tells the two apart: glibc's own rule takes them from the heap."""
    assert _heap_growth_bytes("default") >= 2 * (256 << 10)
