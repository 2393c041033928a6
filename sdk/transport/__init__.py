"""sdk.transport: the seam between clients and brokers.

* :mod:`sdk.transport.models`: the requests and answers that cross it;
* :mod:`sdk.transport.base`: the blocking and asyncio protocols every transport implements;
* :mod:`sdk.transport.in_process`: local mode, direct calls into an embedded broker;
* :func:`resolve` / :func:`resolve_async`: what clients do with the ``broker`` they are given.
"""

from sdk.transport.resolve import BrokerTarget, resolve, resolve_async

__all__ = ["BrokerTarget", "resolve", "resolve_async"]
