"""Several hosts on one machine for tests of what crosses a network: Linux
network namespaces joined by veth pairs (iproute2's `ip netns`, `ip link`),
each with its own addresses, routes and /etc/hosts. Needs root (CI runs
the suite as root); `available()` says why not otherwise, and the tests
that need it are skipped.

    net = Hosts("pool")                  # names and subnets unique to this process
    a = net.add("a")                     # a namespace ("host")
    ip_root, ip_a = net.link(None, a)    # a veth pair: None is this process's own
    net.prefix(a)                        # ["ip", "netns", "exec", <a>]: run a command there
    net.hosts_file(a, "10.1.2.3 pool.test\\n")  # /etc/hosts as programs there see it
    net.close()

Each link is a /24 of its own (10.A.B.0/24, A and B from the pid and the
link's number; .1 on the first side, .2 on the second), so parallel test
processes never share a subnet. A
namespace's /etc/hosts is /etc/netns/<name>/hosts, which `ip netns exec`
mounts over /etc/hosts for the programs it starts; hosts_file rewrites it in
place, so programs already running there see the new contents on their next
lookup.
"""

import os
import shutil
import subprocess
from pathlib import Path


def _ip(*args, check=True):
    r = subprocess.run(["ip"] + [str(a) for a in args], capture_output=True, text=True,
                       timeout=30)
    if check and r.returncode != 0:
        raise RuntimeError("ip %s: %s" % (" ".join(map(str, args)), r.stderr.strip()))
    return r


def available():
    """None when namespaces can be made here, else why not."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "iproute2's ip is not installed"
    probe = "cvy-probe-%d" % os.getpid()
    r = _ip("netns", "add", probe, check=False)
    if r.returncode != 0:
        return "ip netns add failed: %s" % r.stderr.strip()
    _ip("netns", "del", probe, check=False)
    return None


class Hosts:
    def __init__(self, tag):
        pid = os.getpid()
        self._tag = "cvy%s%d" % (tag[:4], pid % 100000)
        # This process's subnets: 10.A.B.0/24 with A and B from the pid, so
        # that processes whose pids differ below 3584 never share one.
        self._octet = 16 + (pid // 16) % 224
        self._third = (pid % 16) * 16
        self._namespaces = []
        self._links = 0
        self._etc = []

    def add(self, name):
        ns = "%s-%s" % (self._tag, name)
        _ip("netns", "add", ns)
        self._namespaces.append(ns)
        _ip("-n", ns, "link", "set", "lo", "up")
        return ns

    def link(self, a, b):
        """A veth pair between namespaces a and b (None: this process's
        own); returns (address on a, address on b)."""
        if self._links == 15:
            raise RuntimeError("netns_hosts: at most 15 links per process")
        self._links += 1
        n = self._third + self._links
        end_a, end_b = "v%d%da" % (os.getpid() % 100000, n), "v%d%db" % (os.getpid() % 100000, n)
        _ip("link", "add", end_a, "type", "veth", "peer", "name", end_b)
        addr_a, addr_b = "10.%d.%d.1" % (self._octet, n), "10.%d.%d.2" % (self._octet, n)
        for end, ns, addr in ((end_a, a, addr_a), (end_b, b, addr_b)):
            if ns is not None:
                _ip("link", "set", end, "netns", ns)
            where = ["-n", ns] if ns is not None else []
            _ip(*where, "addr", "add", addr + "/24", "dev", end)
            _ip(*where, "link", "set", end, "up")
        return addr_a, addr_b

    def prefix(self, ns):
        """The command prefix that runs a program in namespace ns."""
        return ["ip", "netns", "exec", ns]

    def hosts_file(self, ns, text):
        """Sets /etc/hosts as programs in ns see it (in place: running ones too)."""
        folder = Path("/etc/netns") / ns
        if not folder.exists():
            folder.mkdir(parents=True)
            self._etc.append(folder)
        path = folder / "hosts"
        with open(path, "a+") as f:  # the same inode: a bind mount of it sees the change
            f.seek(0)
            f.truncate()
            f.write(text)

    def close(self):
        for ns in reversed(self._namespaces):
            _ip("netns", "del", ns, check=False)  # its veth ends go with it
        self._namespaces = []
        for folder in self._etc:
            shutil.rmtree(folder, ignore_errors=True)
        self._etc = []
