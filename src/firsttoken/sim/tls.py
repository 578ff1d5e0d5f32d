"""Throwaway TLS certificates, so tests can serve the simulator over HTTPS (and so HTTP/2)::

    from firsttoken.sim import Simulator
    from firsttoken.sim.tls import test_certificates

    server_ctx, client_ctx = test_certificates()
    with Simulator(ssl_context=server_ctx) as sim:
        http = openai.DefaultHttpxClient(http2=True, verify=client_ctx)
        client = openai.OpenAI(base_url=sim.openai_base_url, api_key="k", http_client=http)

Needs ``trustme``, a development dependency of firsttoken (not a runtime one); it is imported only
when a certificate is asked for. One certificate authority per process; the contexts are new on every
call, so changing one (the simulator sets its ALPN protocols) does not affect the next.
"""

from __future__ import annotations

import functools
import ssl
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    import trustme

__all__ = ["Certificates", "ca_pem", "test_certificates"]

#: What the simulator's URL may name: it binds to 127.0.0.1 by default.
DEFAULT_HOSTS = ("localhost", "127.0.0.1", "::1")


class Certificates(NamedTuple):
    """A server context with a certificate for the hosts, and a client context that trusts it."""

    #: For ``Simulator(ssl_context=...)``.
    server: ssl.SSLContext
    #: For ``httpx.Client(verify=...)`` / ``openai.DefaultHttpxClient(verify=...)`` and the like.
    client: ssl.SSLContext


@functools.lru_cache(maxsize=1)
def _authority() -> trustme.CA:
    try:
        import trustme
    except ImportError:
        raise ImportError(
            "firsttoken.sim.tls needs the 'trustme' package for test certificates: pip install trustme "
            "(or firsttoken's dev extra); or pass your own ssl_context to Simulator"
        ) from None
    return trustme.CA(organization_name="firsttoken simulator")


@functools.lru_cache(maxsize=16)
def _leaf(hosts: tuple[str, ...]) -> trustme.LeafCert:
    return _authority().issue_cert(*hosts)


def test_certificates(*hosts: str) -> Certificates:
    """A certificate for ``hosts`` (default: localhost, 127.0.0.1 and ::1) and contexts to use it.

    Raises :class:`ImportError` naming ``trustme`` when it is not installed.
    """
    leaf = _leaf(tuple(hosts) or DEFAULT_HOSTS)
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    leaf.configure_cert(server)
    client = ssl.create_default_context()
    _authority().configure_trust(client)
    return Certificates(server, client)


# Not a test, whatever its name: keep pytest from collecting it where a test module imports it.
test_certificates.__test__ = False  # type: ignore[attr-defined]


def ca_pem() -> bytes:
    """The test certificate authority in PEM, for clients configured by file (``SSL_CERT_FILE``)."""
    return _authority().cert_pem.bytes()
