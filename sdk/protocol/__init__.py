"""The wire protocol of remote mode, sans I/O: routes, request and answer shapes, the binary
bodies and the error-code table that the broker's HTTP server and the HTTP transports share.

Bytes in, bytes out: nothing here opens a socket or imports an HTTP library.
"""
