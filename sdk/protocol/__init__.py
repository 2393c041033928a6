"""The wire protocol of remote mode, sans I/O: bytes in, bytes out, no HTTP library.

The HTTP server (the broker) and the HTTP transports (the clients) both use these modules, so
an operation's shapes and an error's meaning are written once:

* :mod:`sdk.protocol.operations`: every control-plane method of the transport seam as a route
  and a JSON request/answer pair (the shapes are in :mod:`sdk.protocol.shapes`);
* :mod:`sdk.protocol.produce_body`: a produce request's binary body (RocketMQ's
  ``MessageBatch`` encoding);
* :mod:`sdk.protocol.pull_body`: a pull answer's binary body (per-queue headers over the stored
  records' bytes);
* :mod:`sdk.protocol.errors`: the one table of wire errors.
"""
