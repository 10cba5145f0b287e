"""Why the daemon could not be reached, in words that say what to fix.

gRPC reports most failures to connect as UNAVAILABLE with text of its own
("failed to connect to all addresses", "Socket closed"). After such a
failure the command line asks the address directly, with one cheap probe,
and turns the mistakes a user can fix into an AccessDenied (exit 6)
that names the fix:

- a unix socket this user may not open (EACCES on connect): the socket's
  (or a parent folder's) mode and group, `usermod -aG GROUP $USER`, and the
  daemon's `listen.allowed_uids` / `allowed_gids`;
- a unix socket whose daemon closes the connection before answering (a
  uid its `listen.allowed_uids` / `allowed_gids` do not let in);
- a TCP port that speaks TLS reached without --tls-ca: the probe sends a
  TLS ClientHello and sees a TLS record come back.

explain() returns None when the probe finds none of them (the daemon is down,
the port is closed, ...): the original error then stands. Functions only,
no state; each probe opens one socket and closes it (timeout: 2 s).
"""

import errno
import grp
import os
import pwd
import socket
import ssl
import stat

from .errors import AccessDenied

_PROBE_TIMEOUT_S = 2.0

# What an HTTP/2 client sends first: the preface and an empty SETTINGS frame.
_HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"

# TLS record content types a TLS server answers a ClientHello with.
_TLS_ALERT = 0x15
_TLS_HANDSHAKE = 0x16


def _unix_path(target):
    """The socket path of a "unix:" target, else None."""
    if target.startswith("unix://"):
        return target[len("unix://"):]
    if target.startswith("unix:"):
        return target[len("unix:"):]
    return None


def _tcp_host_port(target):
    """(host, port) of a "host:port" or "[v6]:port" target, else None."""
    if "://" in target or target.startswith(("unix:", "unix-abstract:")):
        return None
    host, sep, port = target.rpartition(":")
    if not sep or not port.isdigit() or not host:
        return None
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, int(port)


def _group_name(gid):
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


def _user_name(uid):
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def _denied_path(path):
    """The first of the socket's parent folders this process may not enter,
    else the socket itself."""
    folder = os.path.dirname(os.path.abspath(path))
    parts = []
    while True:
        parts.append(folder)
        parent = os.path.dirname(folder)
        if parent == folder:
            break
        folder = parent
    for folder in reversed(parts):
        if not os.access(folder, os.X_OK):
            return folder
    return path


def _socket_access_hint(path):
    denied = _denied_path(path)
    try:
        st = os.stat(denied)
    except OSError:
        return ("permission denied on the daemon's socket %s; ask its administrator to let this "
                "user in (the daemon's listen.unix_mode, listen.allowed_uids / allowed_gids)" % path)
    group = _group_name(st.st_gid)
    what = "the folder %s of the daemon's socket" % denied if denied != path else \
        "the daemon's socket %s" % path
    return ("permission denied on %s (mode %04o, owner %s, group %s) for uid %d (%s): add this "
            "user to group %s (`sudo usermod -aG %s $USER`, then log in again or run `newgrp %s`), "
            "and if the daemon sets listen.allowed_uids / allowed_gids, to one of them"
            % (what, stat.S_IMODE(st.st_mode), _user_name(st.st_uid), group, os.getuid(),
               _user_name(os.getuid()), group, group, group))


def _probe_unix(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(_PROBE_TIMEOUT_S)
    try:
        try:
            s.connect(path)
        except OSError as e:
            if e.errno in (errno.EACCES, errno.EPERM):
                return AccessDenied(_socket_access_hint(path))
            return None
        # A gRPC server sends its HTTP/2 SETTINGS at once; the daemon closes
        # a connection of a uid its listen.allowed_uids / allowed_gids do
        # not let in before writing a byte.
        try:
            s.sendall(_HTTP2_PREFACE)
            answer = s.recv(1)
        except socket.timeout:
            return None
        except OSError as e:
            if e.errno not in (errno.ECONNRESET, errno.EPIPE):
                return None
            answer = b""
        if answer:
            return None
        return AccessDenied(
            "the daemon at %s closed the connection of uid %d (%s) before answering: it does "
            "not let this user in; ask for it (or a group of it) to be added to the daemon's "
            "listen.allowed_uids / allowed_gids" % (path, os.getuid(), _user_name(os.getuid())))
    finally:
        s.close()


def _client_hello():
    """The bytes of a TLS ClientHello (what a TLS client sends first)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = ctx.wrap_bio(incoming, outgoing, server_side=False)
    try:
        tls.do_handshake()
    except ssl.SSLWantReadError:
        pass
    return outgoing.read()


def speaks_tls(host, port, timeout=_PROBE_TIMEOUT_S):
    """Whether host:port answers a TLS ClientHello with a TLS record (a
    handshake or an alert, protocol version 3.x). A plaintext gRPC server
    answers with an HTTP/2 frame or closes the connection."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.sendall(_client_hello())
            head = b""
            while len(head) < 3:
                chunk = s.recv(3 - len(head))
                if not chunk:
                    break
                head += chunk
    except OSError:
        return False
    return len(head) == 3 and head[0] in (_TLS_ALERT, _TLS_HANDSHAKE) and head[1] == 3


def explain(target, security):
    """An AccessDenied that says what to fix when connecting to `target`
    (a gRPC target) failed for a reason a probe can see, else None."""
    path = _unix_path(target)
    if path is not None:
        return _probe_unix(path)
    host_port = _tcp_host_port(target)
    if host_port is None or (security is not None and security.tls_ca):
        return None
    if speaks_tls(*host_port):
        return AccessDenied(
            "%s speaks TLS: pass --tls-ca FILE (the CA that signed the daemon's certificate; "
            "or $CONVEYOR_TLS_CA), and --client-cert/--client-key if it asks for client "
            "certificates" % target)
    return None
