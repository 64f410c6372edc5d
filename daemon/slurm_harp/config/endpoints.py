"""The TCP endpoints of harp.toml: the metrics endpoints' addresses and ports, ``server.tcp``, and
the ports that `harp serve` (``server.tcp``, ``server.metrics_port``) and `harp guard`
(``guard.metrics_port``) listen on together on the controller host.

Checked here so that `harp check-config` refuses what made a service exit 1 at its start: a blank
address (getaddrinfo knows no host ""), a ``host:port`` given as the address, or two endpoints on
one port and address, the second of which could not be bound. The guard's endpoint counts only where
a mode runs the guard (time_min, extend): the role writes its port whatever the mode, and elsewhere
nothing listens there. Whether a name resolves only the host's resolver says, at start
(server.metrics_http.bind_problem names the key then).
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterator
from typing import NamedTuple

from slurm_harp.config.reader import Reader
from slurm_harp.config.settings import GuardSettings, ServerSettings, Settings

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
# grpcio binds server.tcp's "localhost" as both loopbacks, whatever the resolver says. A metrics
# endpoint binds only the first address getaddrinfo gives, ::1 or 127.0.0.1 by the host's /etc/hosts:
# there "localhost" is a name like any other.
_LOCALHOST = ("127.0.0.1", "::1")


class Clash(NamedTuple):
    """The endpoint ``key`` on the port of ``other``, listed before it, on an address both take."""

    key: str
    port: int
    address: str
    other: str
    other_address: str

    def __str__(self) -> str:
        return f"{self.port} is {self.other}'s port too, on {self.address} and {self.other_address}"


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


def server_tcp(r: Reader, tcp: str | None) -> str | None:
    """``server.tcp``, ``host:port`` as grpcio binds it."""
    if tcp is None:
        return None
    host, port = _host_port(tcp)
    # "50051" alone was taken for a port ("expected host:port" was the message, not the check)
    # and passed; `harp serve` then could not listen on it.
    if not (host.strip() and port.isascii() and port.isdigit()):
        raise r.fail("server.tcp", f"expected host:port, got {tcp!r}")
    _check_tcp_host(r, tcp, host, port)
    if int(port) > 65535:  # grpcio bound another port in its place, silently
        raise r.fail("server.tcp", f"port out of range (1 to 65535): {tcp!r}")
    if int(port) == 0:  # grpcio bound a port the kernel picked, which no client is told of
        raise r.fail("server.tcp", f"0 is no port: give the port clients connect to, got {tcp!r}")
    return tcp


def _check_tcp_host(r: Reader, tcp: str, host: str, port: str) -> None:
    """Refuse a ``server.tcp`` host that grpcio cannot bind, which `harp serve` took for one not of
    this machine's: a space in it ("127.0.0.1 :50051"), an IPv6 address without brackets ("::1:50051",
    which grpcio looks up as a name), brackets around anything but an IPv6 address ("[127.0.0.1]")."""
    if any(c.isspace() for c in tcp):
        raise r.fail("server.tcp", f"must be host:port without spaces, got {tcp!r}")
    if host.startswith("[") or host.endswith("]"):
        inside = host.removeprefix("[").removesuffix("]")
        if not (host.startswith("[") and host.endswith("]") and _ipv6(inside)):
            raise r.fail(
                "server.tcp", f"brackets are for an IPv6 address alone, as in [::1]:{port}, got {tcp!r}"
            )
    elif ":" in host and _ipv6(host):  # grpcio looks "::1" up as a name, and finds none
        raise r.fail("server.tcp", f"an IPv6 address must be in brackets: write [{host}]:{port}, got {tcp!r}")
    elif ":" in host:
        raise r.fail(
            "server.tcp",
            "expected host:port with a host name, an IPv4 address or an IPv6 address in brackets "
            f"([::1]:50051), got {tcp!r}",
        )


def _ipv6(host: str) -> bool:
    try:
        ipaddress.IPv6Address(host)  # a scope too: "fe80::1%eth0"
    except ValueError:
        return False
    return True


def check_ports(r: Reader, settings: Settings) -> None:
    """Refuse two of the controller's endpoints that would take one port on one address: the one
    started second exited 1 (`Address already in use`), where check-config had said ok. The guard's
    endpoint only where a mode runs the guard (idle_guard_clash says the others)."""
    for clash in clashes(settings.server, settings.guard):
        if not clash.key.startswith("guard.") or settings.policy.needs_guard:
            raise r.fail(
                clash.key,
                f"{clash}: both listen on this host, and the second to start could not (give each its "
                "own port)",
            )


def idle_guard_clash(settings: Settings) -> Clash | None:
    """The guard's endpoint on one of the daemon's where no mode runs the guard: nothing listens
    there, but a guard started for a time_min or extend mode could not."""
    if settings.policy.needs_guard:
        return None
    return next((c for c in clashes(settings.server, settings.guard) if c.key.startswith("guard.")), None)


def clashes(server: ServerSettings, guard: GuardSettings) -> Iterator[Clash]:
    """Each metrics endpoint on the port of one before it (the daemon's, then ``server.tcp``) on an
    address both would take."""
    # (key, its address as written, the hosts it binds, its port)
    ends = [
        ("server.metrics_port", server.metrics_address, (server.metrics_address,), server.metrics_port),
        ("guard.metrics_port", guard.metrics_address, (guard.metrics_address,), guard.metrics_port),
    ]
    tcp: list[tuple[str, str, tuple[str, ...], int | None]] = []
    if server.tcp is not None:
        shown, tcp_port = _host_port(server.tcp)
        host = shown.removeprefix("[").removesuffix("]")
        tcp = [("server.tcp", shown, _bound_by_grpcio(host), int(tcp_port))]
    for i, (key, address, _, port) in enumerate(ends):
        for other, other_address, hosts, other_port in [*ends[:i], *tcp]:
            if port is not None and port == other_port and any(_overlap(address, h) for h in hosts):
                yield Clash(key, port, address, other, other_address)


def _host_port(tcp: str) -> tuple[str, str]:
    """``server.tcp``'s host (as written: "[::1]") and port, as grpcio splits them."""
    host, _, port = tcp.rpartition(":")
    return host, port


def _bound_by_grpcio(host: str) -> tuple[str, ...]:
    """What grpcio binds for server.tcp's ``host``: "0.0.0.0" as "[::]" (IPv6 too), and
    "localhost" as both loopbacks."""
    if (ip := _ip(host)) is not None and ip.is_unspecified:
        return ("::",)
    if host.lower() == "localhost":
        return (host, *_LOCALHOST)
    return (host,)


def _overlap(a: str, b: str) -> bool:
    """Whether listeners on hosts ``a`` and ``b``, on one port, would both take an address: one
    address or one name; a wildcard and what it covers (``::`` IPv4 too, as Linux's bindv6only is 0),
    a name included, which may resolve to any. Other names, or a name and an address, are taken to
    differ: only a resolver could say."""
    if a.lower() == b.lower():
        return True
    x, y = _ip(a), _ip(b)
    for one, two in ((x, y), (y, x)):
        if one is not None and one.is_unspecified and (one.version == 6 or two is None or two.version == 4):
            return True
    return x is not None and x == y


def _ip(host: str) -> IPAddress | None:
    """``host`` as getaddrinfo reads a numeric one (inet_aton's short forms too: "0", "127.1"), an
    IPv4-mapped IPv6 address as its IPv4 one (Linux binds ::ffff:127.0.0.1 as 127.0.0.1); None for a
    name."""
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        pass
    else:
        return ip.ipv4_mapped or ip if isinstance(ip, ipaddress.IPv6Address) else ip
    if host and all(c.isdigit() or c == "." for c in host):
        try:
            return ipaddress.IPv4Address(socket.inet_aton(host))
        except OSError:
            return None
    return None
