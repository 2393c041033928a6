"""The wire protocol of remote mode, sans I/O: bytes in, bytes out, no HTTP library.

The HTTP server (the broker) and the HTTP transports (the clients) both use these modules, so
an operation's shapes and an error's meaning are written once.
"""
