"""Running a conveyord process: start it with a config, wait until its gRPC
health check says SERVING, stop it (SIGTERM, then SIGKILL after a grace
period). The integration tests, the benchmarks and scripts/demo.sh all start
their daemons through this module; a trainer that runs its own daemon can
too:

    from conveyor.daemon import launch
    with launch("/usr/local/bin/conveyord", "conveyord.yaml") as d:
        loader = conveyor.Loader(d.address, pipeline="train", batch_size=256)
        ...

The daemon listens on a unix socket in a work folder (a fresh one under /tmp
unless one is given) and, when asked, on TCP (port 0 picks a free port; the
bound port comes back through --port-file). Its stdout and stderr go to
`conveyord.log` in the work folder. Waiting is polling with a deadline and
short pauses; a daemon that exits while starting raises DaemonError with the
end of its log.

The launcher trusts only its own child: before starting, a unix socket path
some live process answers on is refused at once ("socket X is in use by pid
N ...": the other daemon and its socket are left alone); and SERVING counts
only once the peer of the unix socket (SO_PEERCRED) is the child's pid. A
TCP-only daemon is its child's once the port file, which the child writes
after binding (in a work folder where the stale one was removed), names the
port.

`health_status(channel)` is the one Python grpc.health.v1 client of the project:
gRPC's own Health stub, generated from proto/grpc/health/v1/health.proto into
conveyor._proto.grpc.health.v1 (no grpcio-health-checking package needed).

Command line: `python3 -m conveyor.daemon --conveyord BIN --config FILE --
COMMAND...` starts the daemon, waits for SERVING, runs COMMAND with
$CONVEYOR_SERVER set to the daemon's address, stops the daemon and exits with
COMMAND's status (see --help).

Thread-safety: a DaemonProcess is driven (start, stop) from one thread;
its read-only properties, poll(), signal() and log() may be called from
others meanwhile.
"""

import argparse
import errno
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time

import grpc

from . import _fork
from ._stubs import health_grpc, health_pb
from .loader import make_channel

# grpc.health.v1.HealthCheckResponse.ServingStatus
_Status = health_pb.HealthCheckResponse
UNKNOWN = _Status.UNKNOWN
SERVING = _Status.SERVING
NOT_SERVING = _Status.NOT_SERVING
SERVICE_UNKNOWN = _Status.SERVICE_UNKNOWN


def health_status(channel, timeout=5.0, service=""):
    """grpc.health.v1.Health/Check on `channel` (a grpc.Channel or an
    address): the ServingStatus number (SERVING = 1). Raises grpc.RpcError
    when the call fails (daemon not up, no health service)."""
    owned = not isinstance(channel, grpc.Channel)
    ch = make_channel(channel) if owned else channel
    try:
        answer = health_grpc.HealthStub(ch).Check(health_pb.HealthCheckRequest(service=service),
                                                  timeout=timeout)
        return answer.status
    finally:
        if owned:
            ch.close()


def is_serving(channel, timeout=1.0):
    """True when the health check answers SERVING; False when it answers
    anything else or the call fails."""
    try:
        return health_status(channel, timeout) == SERVING
    except grpc.RpcError:
        return False


def default_binary():
    """$CONVEYORD, else `conveyord` on $PATH (None when neither)."""
    return os.environ.get("CONVEYORD") or shutil.which("conveyord")


class DaemonError(RuntimeError):
    """conveyord exited while starting, or was not SERVING in time."""


class SocketInUse(DaemonError):
    """Another live process answers on the unix socket path: `path`, `pid`
    (None when the kernel does not tell)."""

    def __init__(self, path, pid):
        self.path, self.pid = path, pid
        super().__init__(
            "socket %s is in use by %s; not starting another conveyord on it (the other "
            "process and its socket are left alone): stop it, or give another socket path"
            % (path, _describe_pid(pid)))


def _describe_pid(pid):
    """"pid N (its command line)" as far as /proc tells."""
    if not pid:
        return "another process (its pid unknown)"
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        cmd = ""
    return "pid %d (%s)" % (pid, cmd[:200]) if cmd else "pid %d" % pid


def unix_socket_peer(path, timeout=1.0):
    """The pid of the process listening on unix socket `path` (SO_PEERCRED
    of a connection to it); None when nothing listens there (no file, a
    stale socket file, not a socket). The connection is closed at once
    without a byte sent."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.settimeout(timeout)
        try:
            s.connect(os.fspath(path))
        except (FileNotFoundError, ConnectionRefusedError, NotADirectoryError):
            return None
        except OSError as e:
            if e.errno in (errno.ENOTSOCK, errno.ECONNREFUSED):
                return None
            raise
        cred = s.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        pid, _uid, _gid = struct.unpack("3i", cred)
        return pid
    finally:
        s.close()


class DaemonProcess:
    """One conveyord process.

    DaemonProcess(binary, config, workdir=None, socket=None, tcp=None,
                  threads=None, extra_args=(), env=None)
      config      path of the YAML config file
      workdir     folder for the socket, port file and log (default: a new
                  folder under /tmp, removed by close())
      socket      unix socket path (default <workdir>/conveyor.sock); ""
                  for none
      tcp         "HOST:PORT" to listen on TCP as well (port 0: a free
                  one); None: no TCP listener
      threads     --threads (None: the config's)
      extra_args  more command-line arguments
    start() returns once SERVING; `unix`, `tcp`, `address`, `pid`,
    `log()`; stop() (SIGTERM, SIGKILL after a grace period) or kill().
    Usable as a context manager (started on entry if not yet, stopped on
    exit).
    """

    def __init__(self, binary, config, workdir=None, socket=None, tcp=None, threads=None,
                 extra_args=(), env=None):
        if not binary:
            raise DaemonError("no conveyord binary given (nor $CONVEYORD, nor conveyord on $PATH)")
        # The process runs in the work folder: relative paths are made absolute
        # (a bare name is looked up on $PATH).
        binary = str(binary)
        self.binary = os.path.abspath(binary) if os.sep in binary else binary
        self.config_path = os.path.abspath(str(config))
        self._own_workdir = workdir is None
        # Short paths: a unix socket path is limited to 107 bytes.
        self.workdir = tempfile.mkdtemp(prefix="conveyord-", dir="/tmp") if workdir is None \
            else str(workdir)
        os.makedirs(self.workdir, exist_ok=True)
        self.socket_path = os.path.join(self.workdir, "conveyor.sock") if socket is None \
            else str(socket)
        self.tcp_listen = tcp
        self.port_file = os.path.join(self.workdir, "port")
        self.log_path = os.path.join(self.workdir, "conveyord.log")
        self.threads = threads
        self.extra_args = [str(a) for a in extra_args]
        self.env = env
        self.proc = None
        self.port = None
        self.launched_at = None  # time.monotonic() at spawn
        self.serving_at = None   # time.monotonic() when SERVING was seen
        self._log = None

    # --- addresses
    @property
    def unix(self):
        """"unix:///path" of the unix socket, or None."""
        return "unix://" + os.path.abspath(self.socket_path) if self.socket_path else None

    @property
    def tcp(self):
        """"HOST:PORT" to reach the TCP listener, or None (not listening, or
        the port not known yet)."""
        if not self.tcp_listen or self.port is None:
            return None
        host = self.tcp_listen.rsplit(":", 1)[0]
        host = {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "[::]": "[::1]"}.get(host, host)
        return "%s:%d" % (host, self.port)

    @property
    def address(self):
        """The address a client on this machine should use: the unix socket
        when there is one, else TCP."""
        return self.unix or self.tcp

    @property
    def pid(self):
        return self.proc.pid

    def command(self):
        cmd = [self.binary, "--config", self.config_path, "--socket", self.socket_path or ""]
        cmd += ["--tcp", self.tcp_listen, "--port-file", self.port_file] if self.tcp_listen \
            else ["--tcp", "none"]
        if self.threads is not None:
            cmd += ["--threads", str(self.threads)]
        return cmd + self.extra_args

    # --- lifecycle
    def spawn(self):
        """Starts the process without waiting; see wait_serving()."""
        if self.proc is not None:
            raise DaemonError("conveyord already started (pid %d)" % self.proc.pid)
        if self.socket_path:
            other = unix_socket_peer(self.socket_path)
            if other is not None:
                raise SocketInUse(self.socket_path, other)
        if self.tcp_listen:
            try:
                os.unlink(self.port_file)  # a stale port from an earlier daemon in this folder
            except FileNotFoundError:
                pass
        self._log = open(self.log_path, "ab")
        self.launched_at = time.monotonic()
        env = self.env
        if env is None and _fork.set_by_conveyor():
            # The Python client's own gRPC fork support is not the daemon's business.
            env = {k: v for k, v in os.environ.items() if k != _fork.ENV}
        self.proc = subprocess.Popen(self.command(), stdout=self._log, stderr=subprocess.STDOUT,
                                     cwd=self.workdir, env=env)
        return self

    def start(self, timeout=60.0):
        """spawn() + wait_serving(timeout); returns self."""
        self.spawn()
        try:
            self.wait_serving(timeout)
        except BaseException:
            self.kill()
            raise
        return self

    def _read_port(self):
        try:
            with open(self.port_file) as f:
                text = f.read().strip()
        except FileNotFoundError:
            return None
        return int(text) if text.isdigit() else None

    def wait_serving(self, timeout=60.0):
        """Polls the health check until SERVING; raises DaemonError if the
        process exits or `timeout` s pass first."""
        deadline = time.monotonic() + timeout
        pause, channel, last = 0.002, None, "no answer yet"
        other = None  # the pid of another process seen answering on the socket
        try:
            while True:
                if self.proc.poll() is not None:
                    if other is not None:
                        raise SocketInUse(self.socket_path, other)
                    raise DaemonError("conveyord exited with status %s while starting:\n%s"
                                      % (self.proc.returncode, self.log_tail()))
                if self.tcp_listen and self.port is None:
                    self.port = self._read_port()
                if channel is None and self.address and (
                        not self.unix or os.path.exists(self.socket_path)):
                    channel = make_channel(self.address)
                if channel is not None and (not self.tcp_listen or self.port is not None):
                    left = deadline - time.monotonic()
                    try:
                        status = health_status(channel, timeout=min(1.0, max(0.05, left)))
                        if status == SERVING:
                            peer = self._foreign_peer()
                            if peer is None:
                                self.serving_at = time.monotonic()
                                return self
                            # Not ours: the child will exit (conveyord refuses a live
                            # socket), or it is not SERVING in time.
                            other = peer
                            last = "the socket is answered by %s, not by this conveyord " \
                                   "(pid %d)" % (_describe_pid(peer), self.proc.pid)
                            channel.close()
                            channel = None
                        else:
                            last = "health status %d" % status
                    except grpc.RpcError as e:
                        last = "%s: %s" % (e.code(), e.details())
                        # A fresh channel next time: a failed one waits out
                        # gRPC's reconnect backoff (a stale socket file of an
                        # earlier daemon in this folder, say).
                        channel.close()
                        channel = None
                if time.monotonic() >= deadline:
                    raise DaemonError("conveyord (pid %d) not SERVING within %.1f s (last: %s):\n%s"
                                      % (self.proc.pid, timeout, last, self.log_tail()))
                time.sleep(pause)
                pause = min(0.05, pause * 2)
        finally:
            if channel is not None:
                channel.close()

    def _foreign_peer(self):
        """None when the unix socket's listener is the child (or there is no
        unix socket: then the port file, written by the child, told the
        port); else the pid that listens there instead (0: unknown)."""
        if not self.socket_path:
            return None
        try:
            peer = unix_socket_peer(self.socket_path)
        except OSError:
            return 0
        if peer == self.proc.pid:
            return None
        return peer or 0

    def poll(self):
        return None if self.proc is None else self.proc.poll()

    def signal(self, sig):
        self.proc.send_signal(sig)

    def wait(self, timeout=None):
        """Waits for the process to exit; its status (subprocess.TimeoutExpired
        after `timeout` s)."""
        return self.proc.wait(timeout=timeout)

    def stop(self, timeout=10.0):
        """SIGTERM, then SIGKILL if it has not exited within `timeout` s;
        returns the exit status (None if never started)."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._close_log()
        return self.proc.returncode

    def kill(self):
        """SIGKILL (if still running) and reap."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._close_log()

    def close(self):
        """stop(), then remove the work folder if this object made it."""
        rc = self.stop()
        if self._own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)
        return rc

    def _close_log(self):
        if self._log is not None:
            self._log.close()
            self._log = None

    def log(self):
        """The daemon's output so far."""
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def log_tail(self, chars=4000):
        return self.log()[-chars:]

    def __enter__(self):
        if self.proc is None:
            self.start()
        return self

    def __exit__(self, *exc):
        self.close()


def launch(binary, config, timeout=60.0, **kwargs):
    """A started DaemonProcess (SERVING) to use in a `with` block, which stops
    it (and removes its temporary work folder) at the end."""
    return DaemonProcess(binary, config, **kwargs).start(timeout)


def main(argv=None):
    ap = argparse.ArgumentParser(
        prog="python3 -m conveyor.daemon",
        description="Start conveyord, wait until its health check says SERVING, run COMMAND "
                    "with $CONVEYOR_SERVER set to the daemon's address, then stop the daemon. "
                    "Exits with COMMAND's status (1 if the daemon did not start).")
    ap.add_argument("--conveyord", default=default_binary(),
                    help="the conveyord binary (default: $CONVEYORD, else conveyord on $PATH)")
    ap.add_argument("--config", required=True, help="conveyord's YAML config")
    ap.add_argument("--socket", default=None,
                    help="unix socket path (default: conveyor.sock in a temporary folder)")
    ap.add_argument("--tcp", default=None, help="also listen on TCP HOST:PORT (port 0: a free one)")
    ap.add_argument("--threads", type=int, default=None,
                    help="worker threads (default: the config's)")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for SERVING")
    ap.add_argument("--keep-log", action="store_true", help="print the daemon's log at the end")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARGS...]")
    args = ap.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        ap.error("no COMMAND to run (put it after --)")
    workdir = tempfile.mkdtemp(prefix="conveyord-", dir="/tmp")
    d = DaemonProcess(args.conveyord, args.config, workdir=workdir, socket=args.socket,
                      tcp=args.tcp, threads=args.threads)
    try:
        try:
            d.start(args.timeout)
        except DaemonError as e:
            print("conveyor.daemon: %s" % e, file=sys.stderr)
            return 1
        print("conveyor.daemon: conveyord (pid %d) is serving on %s%s (log: %s)"
              % (d.pid, d.address, " and " + d.tcp if d.unix and d.tcp else "", d.log_path),
              file=sys.stderr, flush=True)
        env = dict(os.environ, CONVEYOR_SERVER=d.address)
        try:
            rc = subprocess.call(command, env=env)
        except OSError as e:
            print("conveyor.daemon: cannot run %s: %s" % (command[0], e), file=sys.stderr)
            rc = 127
        status = d.stop()
        if status != 0:
            print("conveyor.daemon: conveyord exited with status %s:\n%s"
                  % (status, d.log_tail()), file=sys.stderr)
            rc = rc or 1
        elif args.keep_log:
            sys.stderr.write(d.log())
        return rc
    finally:
        d.kill()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
