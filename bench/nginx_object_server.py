"""An nginx object server for the HTTP benchmarks: the files under a root on
127.0.0.1 (a free port), with a fixed latency before every answer.

The same interface as tests/integration/remote_fixtures.py's ObjectServer as
far as bench/remote_http.py uses it: .base ("http://127.0.0.1:PORT"), .port,
.stats() (a dict with "requests", the requests answered less the stats
requests themselves, and "cpu_s", the user + system CPU seconds of the nginx
process) and .stop().

Why not the Python server: on a 2-core box it shares the cores with the
daemon under test, at about 0.15 CPU-ms per request, which is a material
part of the figure; a real object store's CPU is not on the training node.
nginx serves the files itself (sendfile, Range: 206 / Content-Range / 416)
and the latency is a Lua timer (ngx.sleep in the access phase: non-blocking,
no thread waits), so its own cost per request is a fraction of that.

One process (`daemon off; master_process off;`): its pid is the Popen's, and
its CPU is that one process's. Needs nginx and, for a latency above 0, the
Lua module (Debian 12: nginx-light libnginx-mod-http-lua; see
scripts/install-deps.sh --bench).
"""

import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request

MODULES_DIR = "/usr/lib/nginx/modules"
LUA_MODULES = ("ndk_http_module.so", "ngx_http_lua_module.so")
INSTALL_HINT = ("install it with `scripts/install-deps.sh --bench` (Debian 12: "
                "apt-get install nginx-light libnginx-mod-http-lua)")

CONF = """\
daemon off;
master_process off;
pid {tmp}/nginx.pid;
error_log {tmp}/error.log warn;
{modules}
events {{
    worker_connections 4096;
}}

http {{
    access_log off;
    sendfile on;
    tcp_nopush off;
    tcp_nodelay on;
    keepalive_requests 1000000;
    keepalive_timeout 300s;
    server_tokens off;
    log_not_found off;
    default_type application/octet-stream;
    client_body_temp_path {tmp}/client_body;
    proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fastcgi;
    uwsgi_temp_path {tmp}/uwsgi;
    scgi_temp_path {tmp}/scgi;

    server {{
        listen 127.0.0.1:{port} backlog=4096;
        root {root};

        location = /__stats {{
            stub_status;
        }}

        location / {{
{latency}        }}
    }}
}}
"""


def _quote(path):
    """A path as an nginx config string."""
    return '"%s"' % path.replace("\\", "\\\\").replace('"', '\\"')


def find_nginx():
    """The nginx binary (Debian puts it in /usr/sbin, not on a user's PATH)."""
    path = shutil.which("nginx") or shutil.which("nginx", path="/usr/sbin:/usr/local/sbin")
    if not path:
        raise RuntimeError("nginx not found: " + INSTALL_HINT)
    return path


def _free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _raise_nofile():
    """In the child: 4096 worker_connections need as many descriptors."""
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = 8192 if hard == resource.RLIM_INFINITY else min(hard, 8192)
    if soft != resource.RLIM_INFINITY and soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))


class NginxObjectServer:
    """nginx serving `root` on 127.0.0.1, `latency_ms` before every answer
    (the stats location excepted); stop() at the end."""

    def __init__(self, root, latency_ms=0, timeout=20.0, attempts=5):
        self.nginx = find_nginx()
        modules = ""
        latency = ""
        if float(latency_ms) > 0:
            missing = [m for m in LUA_MODULES
                       if not os.path.isfile(os.path.join(MODULES_DIR, m))]
            if missing:
                raise RuntimeError("the nginx Lua module is missing (%s in %s), needed for the "
                                   "latency: %s" % (", ".join(missing), MODULES_DIR, INSTALL_HINT))
            modules = "".join("load_module %s;\n" % _quote(os.path.join(MODULES_DIR, m))
                              for m in LUA_MODULES)
            latency = ("            access_by_lua_block { ngx.sleep(%s) }\n"
                       % repr(float(latency_ms) / 1000.0))
        self.root = os.path.abspath(str(root))
        self.tmp = tempfile.mkdtemp(prefix="nginx-obj-")
        self.proc = None
        self._stats_requests = 0
        errors = ""
        try:
            for _ in range(attempts):
                self.port = _free_port()
                self._stats_requests = 0
                conf = os.path.join(self.tmp, "nginx.conf")
                with open(conf, "w") as f:
                    f.write(CONF.format(tmp=self.tmp, modules=modules, port=self.port,
                                        root=_quote(self.root), latency=latency))
                log = os.path.join(self.tmp, "error.log")
                if os.path.exists(log):
                    os.remove(log)
                self.proc = subprocess.Popen(
                    [self.nginx, "-p", self.tmp, "-c", conf, "-e", log],
                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE, preexec_fn=_raise_nofile)
                self.base = "http://127.0.0.1:%d" % self.port
                if self._wait_ready(timeout):
                    return
                errors = self._read_errors()
                self._terminate()
                if not re.search(r"bind\(\).*failed|Address already in use", errors):
                    break  # not a port race: retrying will not help
            raise RuntimeError("nginx did not start:\n%s" % errors.strip())
        except BaseException:
            self.stop()
            raise

    def _read_errors(self):
        text = ""
        if self.proc and self.proc.poll() is not None and self.proc.stderr:
            text += self.proc.stderr.read().decode(errors="replace")
        try:
            with open(os.path.join(self.tmp, "error.log"), errors="replace") as f:
                text += f.read()
        except OSError:
            pass
        return text

    def _wait_ready(self, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            try:
                self.stats()
                return True
            except (OSError, urllib.error.URLError):
                time.sleep(0.05)
        return False

    def stats(self):
        """requests: answered so far, the stats requests excepted (nginx
        counts a request when it arrives, so one in flight is included);
        cpu_s: the nginx process's user + system CPU seconds."""
        with urllib.request.urlopen(self.base + "/__stats", timeout=10) as r:
            text = r.read().decode()
        self._stats_requests += 1  # stub_status counts the request asking, and every earlier one
        m = re.search(r"server accepts handled requests\s+(\d+)\s+(\d+)\s+(\d+)", text)
        if not m:
            raise RuntimeError("unexpected stub_status answer: %r" % text)
        return {"requests": int(m.group(3)) - self._stats_requests,
                "connections": int(m.group(1)),
                "cpu_s": self.cpu_seconds()}

    def cpu_seconds(self):
        with open("/proc/%d/stat" % self.proc.pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def _terminate(self):
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.terminate()  # SIGTERM: nginx's fast shutdown
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        if self.proc.stderr:
            self.proc.stderr.close()
        self.proc = None

    def stop(self):
        self._terminate()
        if self.tmp:
            shutil.rmtree(self.tmp, ignore_errors=True)
            self.tmp = None


if __name__ == "__main__":
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", required=True)
    ap.add_argument("--latency-ms", type=float, default=0)
    args = ap.parse_args()
    srv = NginxObjectServer(args.root, args.latency_ms)
    print("PORT %d" % srv.port, flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        srv.stop()
