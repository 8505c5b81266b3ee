"""daphne's HTTP parser (Twisted) drops the connection, without a word, when the request line
or a header line is longer than 16 KiB (``LineReceiver.lineLengthExceeded``). Answer
``414 URI Too Long`` instead, as other servers do, so a client learns why; shorter query
strings over ``core.limits.MAX_QUERY_STRING_BYTES`` get their 414 from the middleware."""

from __future__ import annotations

from typing import Any

BODY = b'{"detail": "The request line or a header is too long."}'


def answer_long_lines() -> None:
    try:
        from twisted.web import http
    except ImportError:  # not under daphne
        return

    def line_length_exceeded(self: Any, line: bytes) -> None:
        self.transport.write(
            b"HTTP/1.1 414 URI Too Long\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(BODY), BODY)
        )
        self.loseConnection()

    http.HTTPChannel.lineLengthExceeded = line_length_exceeded  # type: ignore[method-assign]  # the patch
