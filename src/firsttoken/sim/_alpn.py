"""One connection's protocol, picked by ALPN: HTTP/2 (``_h2``) when the client chose ``h2``, else HTTP/1.1.

Above both wire modules, so that ``h2`` is imported only when a client negotiates it and neither
wire module needs the other's.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable

from ._http import Connection, H11Connection, Handler


class _Negotiated(asyncio.Protocol):
    """Stands in until the connection is up, then hands it to the protocol ALPN picked."""

    def __init__(self, handler: Handler, connections: set[Connection]) -> None:
        self._handler = handler
        self._connections = connections

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        ssl_object = transport.get_extra_info("ssl_object")
        alpn = ssl_object.selected_alpn_protocol() if isinstance(ssl_object, ssl.SSLObject) else None
        protocol: asyncio.Protocol
        if alpn == "h2":
            from ._h2 import H2Connection

            protocol = H2Connection(self._handler, self._connections)
        else:
            protocol = H11Connection(self._handler, self._connections)
        transport.set_protocol(protocol)
        protocol.connection_made(transport)


def make_protocol(handler: Handler, connections: set[Connection]) -> Callable[[], asyncio.Protocol]:
    """The protocol factory for ``loop.create_server``: HTTP/2 when ALPN selected ``h2``, else HTTP/1.1.

    The TLS handshake (and so ALPN) is over before ``connection_made``, and no byte has been read.
    """

    def factory() -> asyncio.Protocol:
        return _Negotiated(handler, connections)

    return factory
