"""The client's reading of server addresses (no daemon needed): which gRPC
target an address becomes, and which host a TCP stream's data socket is
reached at (none for unix sockets)."""

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "client", "python"))

from conveyor._datasock import tcp_host  # noqa: E402
from conveyor.loader import grpc_target  # noqa: E402


@pytest.mark.parametrize("address, host", [
    ("127.0.0.1:7070", "127.0.0.1"),
    ("trainer-node-3:7070", "trainer-node-3"),
    ("[::1]:7070", "::1"),
    ("dns:///conveyor.example:7070", "conveyor.example"),
    ("ipv4:10.0.0.5:7070", "10.0.0.5"),
    ("ipv4:10.0.0.5:7070,10.0.0.6:7070", "10.0.0.5"),
    ("ipv6:[fe80::1]:7070", "fe80::1"),
    ("unix:///run/conveyor/conveyor.sock", None),
    ("unix:relative.sock", None),
    ("/run/conveyor/conveyor.sock", None),
    ("", None),
    (None, None),
])
def test_tcp_host(address, host):
    assert tcp_host(address) == host


def test_grpc_target():
    assert grpc_target("/run/c.sock") == "unix:///run/c.sock"
    assert grpc_target("unix:///run/c.sock") == "unix:///run/c.sock"
    assert grpc_target("host:1") == "host:1"
    assert tcp_host(grpc_target("/run/c.sock")) is None
