"""Defaults shared by the ``quiver perf`` parser and the benchmarks it runs.

This module imports nothing, so that the parser (``quiver perf --help``) shows a benchmark's
defaults without loading the SDK, and a benchmark never imports the CLI that runs it.
"""

# The group sizes ``quiver perf rebalance`` walks through, one membership change at a time.
DEFAULT_SIZES = (1, 3, 2, 4, 6, 5, 8, 7, 4, 2, 1, 3, 5, 8, 6, 3, 2, 4, 7, 2, 1)

REMOTE_PULL_BATCH = 1000
"""``quiver perf consume``'s records per queue per pull (``--pull-batch``): the consumers
prefetch, and their polls hand out ``--batch`` at a time."""
