"""The TCP endpoints of harp.toml: the metrics endpoints' addresses and ports, and the ports that
`harp serve` (``server.tcp``, ``server.metrics_port``) and `harp guard` (``guard.metrics_port``)
listen on together on the controller host.

Checked here so that `harp check-config` refuses what made a service exit 1 at its start: a blank
address (getaddrinfo knows no host ""), a ``host:port`` given as the address, or two endpoints on
one port and address, the second of which could not be bound. Whether a name resolves only the
host's resolver says, at start (server.metrics_http.bind_problem names the key then).
"""

from __future__ import annotations

import ipaddress
import socket

from slurm_harp.config.reader import Reader
from slurm_harp.config.settings import GuardSettings, ServerSettings

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
# What a listener on "localhost" takes: getaddrinfo gives both, and grpcio binds both.
_LOCALHOST = (ipaddress.ip_address("127.0.0.1"), ipaddress.ip_address("::1"))


def metrics_address(r: Reader, section: str, address: str) -> str:
    """A host name or address to bind, as getaddrinfo takes it."""
    key = f"{section}.metrics_address"
    if not address.strip():
        raise r.fail(key, f"must be a host name or address (such as 127.0.0.1 or 0.0.0.0), got {address!r}")
    if address != address.strip() or any(c.isspace() for c in address):
        raise r.fail(key, f"must be one host name or address without spaces, got {address!r}")
    if address.startswith("[") or address.count(":") == 1:
        # getaddrinfo takes neither "[::1]" nor "127.0.0.1:9817": no host of that name.
        raise r.fail(
            key,
            f"must be an address alone, without brackets or a port (that is {section}.metrics_port), "
            f"got {address!r}",
        )
    try:
        address.encode("idna")  # what getaddrinfo encodes a name with: "a..b" raised UnicodeError
    except UnicodeError as exc:
        raise r.fail(key, f"not a host name or address: {exc.__cause__ or exc}, got {address!r}") from None
    return address


def metrics_port(r: Reader, section: str, port: int | None) -> int | None:
    """A metrics port: 1-65535, or unset for no endpoint. 0 asked the kernel for any free port: an
    endpoint no Prometheus was told of (the role's variable says 0 for none, and writes none)."""
    if port == 0:
        raise r.fail(f"{section}.metrics_port", "0 is no port: leave it unset for no metrics endpoint")
    if port is not None and not 0 < port < 65536:
        raise r.fail(f"{section}.metrics_port", f"out of range: {port}")
    return port


def check_ports(r: Reader, server: ServerSettings, guard: GuardSettings) -> None:
    """Refuse two of the controller's endpoints that would take one port on one address: the one
    started second exited 1 (`Address already in use`), where check-config had said ok."""
    # (key, its address as written, the address it binds, its port)
    ends = [
        ("server.metrics_port", server.metrics_address, server.metrics_address, server.metrics_port),
        ("guard.metrics_port", guard.metrics_address, guard.metrics_address, guard.metrics_port),
    ]
    tcp: list[tuple[str, str, str, int | None]] = []
    if server.tcp is not None:
        shown, _, tcp_port = server.tcp.rpartition(":")
        host = shown.removeprefix("[").removesuffix("]")
        if (ip := _ip(host)) is not None and ip.is_unspecified:
            host = "::"  # grpcio binds "0.0.0.0" as it binds "[::]": IPv6 too
        tcp = [("server.tcp", shown, host, int(tcp_port))]
    for i, (key, address, _, port) in enumerate(ends):
        for other, other_shown, other_host, other_port in [*ends[:i], *tcp]:
            if port is not None and port == other_port and _overlap(address, other_host):
                raise r.fail(
                    key,
                    f"{port} is {other}'s port too, on {address} and {other_shown}: both listen on "
                    "this host, and the second to start could not (give each its own port)",
                )


def _overlap(a: str, b: str) -> bool:
    """Whether listeners on hosts ``a`` and ``b``, on one port, would both take an address: one
    address; a wildcard and what it covers (``::`` IPv4 too, as Linux's bindv6only is 0), a name
    included, which may resolve to any; localhost and 127.0.0.1 or ::1 (grpcio binds it as both).
    Other names, or a name and an address, are taken to differ: only a resolver could say."""
    if a.lower() == b.lower():
        return True
    x, y = _ip(a), _ip(b)
    for one, two, name in ((x, y, b), (y, x, a)):
        if one is not None and one.is_unspecified and (one.version == 6 or two is None or two.version == 4):
            return True
        if one is not None and name.lower() == "localhost" and one in _LOCALHOST:
            return True
    return x is not None and x == y


def _ip(host: str) -> IPAddress | None:
    """``host`` as getaddrinfo reads a numeric one (inet_aton's short forms too: "0", "127.1"); None
    for a name."""
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        pass
    if host and all(c.isdigit() or c == "." for c in host):
        try:
            return ipaddress.IPv4Address(socket.inet_aton(host))
        except OSError:
            return None
    return None
