"""sdk.transport: the seam between clients and brokers.

* :mod:`sdk.transport.models`: the requests and answers that cross it;
* :mod:`sdk.transport.base`: the blocking and asyncio protocols every transport implements;
* :mod:`sdk.transport.in_process`: local mode, direct calls into an embedded broker;
* :mod:`sdk.transport.http_sync` / :mod:`sdk.transport.http_async`: remote mode, over httpx and
  aiohttp (the only modules that import them), sharing :mod:`sdk.transport.http_common`;
* :func:`resolve` / :func:`resolve_async`: what clients do with the ``broker`` they are given
  (a URL such as ``"http://host:8080"``, an embedded broker, or a transport).
"""

from sdk.transport.resolve import BrokerTarget, resolve, resolve_async

__all__ = ["BrokerTarget", "resolve", "resolve_async"]
