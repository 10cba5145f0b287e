"""The daemons a pooled Loader draws from: the entries of `servers=`, with
DNS names resolved to one daemon per address and resolved again every few
seconds, so daemons that join or leave (pods of a Kubernetes headless
Service) are used or dropped while an epoch runs.

Entries:
  "unix:///path.sock", "unix:path" or "/path.sock"   one daemon on this host
  "10.0.0.7:50051", "[fd00::7]:50051"                 one daemon
  "conveyor-pool.ns.svc:50051"                         every address the name
      resolves to (A and AAAA records, /etc/hosts), each its own daemon; TLS
      checks each one's certificate against the name (unless the Security
      names a tls_server_name of its own)

The first entry is the "local" daemon of the local_first policy. A name that
stops resolving keeps its last answer (a DNS hiccup must not drop every
daemon) and the failure is recorded in `errors`.

Thread-safety: ServerSet is used by one resolver thread and read by others
through current(), which returns an immutable snapshot.
"""

from __future__ import annotations

import ipaddress
import socket
import threading
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from .errors import InvalidRequest

Resolver = Callable[[str, int], List[str]]


@dataclass(frozen=True)
class Endpoint:
    """One daemon: the address a channel connects to, the DNS name it came
    from (None for an address given as such) and its entry in servers=."""
    address: str
    server_name: Optional[str]
    entry: int

    @property
    def is_local(self) -> bool:
        return self.entry == 0


def _resolve(host: str, port: int) -> List[str]:
    """Every address `host` resolves to, in the resolver's order, once each."""
    out: List[str] = []
    for family, _, _, _, sockaddr in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM):
        ip = sockaddr[0]
        text = "[%s]:%d" % (ip, port) if family == socket.AF_INET6 else "%s:%d" % (ip, port)
        if text not in out:
            out.append(text)
    return out


def _split_host_port(entry: str) -> Tuple[str, int]:
    if entry.startswith("["):
        host, sep, rest = entry[1:].partition("]:")
        if not sep:
            raise InvalidRequest("server %r: an IPv6 address is written [address]:port" % entry)
    else:
        host, sep, rest = entry.rpartition(":")
        if not sep or not host:
            raise InvalidRequest("server %r is not \"host:port\", \"unix:///path.sock\" or an "
                                 "absolute socket path" % entry)
    try:
        port = int(rest)
    except ValueError:
        port = -1
    if not 0 < port < 65536:
        raise InvalidRequest("server %r: the port must be a number in 1..65535" % entry)
    return host, port


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        return False


class ServerSet:
    """The daemons of servers=, as Endpoints. resolve() refreshes the DNS
    names; current() is the latest answer."""

    def __init__(self, servers: Sequence[str], resolver: Resolver = _resolve) -> None:
        if isinstance(servers, str):
            raise InvalidRequest("servers= takes a list of addresses, not one string: "
                                 "servers=[%r]" % servers)
        entries = list(servers)
        if not entries:
            raise InvalidRequest("servers= needs at least one address")
        self._resolver = resolver
        self._fixed: Dict[int, Endpoint] = {}
        self._names: Dict[int, Tuple[str, int]] = {}
        for i, entry in enumerate(entries):
            if not isinstance(entry, str) or not entry:
                raise InvalidRequest("servers[%d] must be a non-empty address string, got %r"
                                     % (i, entry))
            if entry.startswith("unix:") or entry.startswith("/"):
                self._fixed[i] = Endpoint(entry, None, i)
                continue
            host, port = _split_host_port(entry)
            if _is_ip(host):
                self._fixed[i] = Endpoint(entry, None, i)
            else:
                self._names[i] = (host, port)
        self.entries = entries
        self._lock = threading.Lock()
        self._answers: Dict[int, List[str]] = {}
        self.errors: Dict[str, str] = {}  # name -> why its last resolution failed

    def __getstate__(self) -> Dict:
        # Pickled with a Loader for a spawned worker: all but the lock.
        state = self.__dict__.copy()
        del state["_lock"]
        return state

    def __setstate__(self, state: Dict) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    @property
    def has_names(self) -> bool:
        return bool(self._names)

    def resolve(self) -> None:
        """Resolves every DNS name once more (blocking: the resolver's time)."""
        for i, (host, port) in self._names.items():
            try:
                answer = self._resolver(host, port)
                error = None if answer else "no address"
            except OSError as e:
                answer, error = [], str(e)
            with self._lock:
                if answer:
                    self._answers[i] = answer
                    self.errors.pop(host, None)
                else:
                    self.errors[host] = error or "no address"

    def current(self) -> List[Endpoint]:
        """The daemons now, in servers= order (a name's addresses in its
        resolver's order)."""
        out: List[Endpoint] = []
        with self._lock:
            for i in range(len(self.entries)):
                if i in self._fixed:
                    out.append(self._fixed[i])
                else:
                    host = self._names[i][0]
                    out.extend(Endpoint(a, host, i) for a in self._answers.get(i, []))
        seen = set()
        unique = []
        for e in out:
            if e.address not in seen:
                seen.add(e.address)
                unique.append(e)
        return unique
