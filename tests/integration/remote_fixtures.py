"""Helpers of the remote-dataset tests: start the test object server
(http_object_server.py) on loopback and write URL lists whose label is the
sample's index, so a test can tell every sample apart in what it reads."""

import subprocess
import sys
import time
from pathlib import Path

SERVER = Path(__file__).resolve().parent / "http_object_server.py"
# Python's own http.server with a listen backlog of choice (an ordinary server).
STDLIB_SERVER = Path(__file__).resolve().parent / "stdlib_http_server.py"


class ObjectServer:
    """http_object_server.py (or `script`, which prints "PORT n" alike) on
    127.0.0.1, a free port; stop() at the end."""

    def __init__(self, root, *args, timeout=20.0, script=SERVER):
        self.proc = subprocess.Popen([sys.executable, str(script), "--root", str(root), *args],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + timeout
        line = ""
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if line.startswith("PORT ") or self.proc.poll() is not None:
                break
        if not line.startswith("PORT "):
            self.stop()
            raise RuntimeError("object server did not start: %r %s" % (
                line, self.proc.stderr.read() if self.proc.stderr else ""))
        self.port = int(line.split()[1])
        self.base = "http://127.0.0.1:%d" % self.port

    def stats(self):
        import json
        import urllib.request
        with urllib.request.urlopen(self.base + "/__stats", timeout=10) as r:
            return json.loads(r.read())

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        for f in (self.proc.stdout, self.proc.stderr):
            if f:
                f.close()


def image_files(root):
    """The images of an ImageFolder tree in the dataset's order (class, name)."""
    root = Path(root)
    return sorted(p.relative_to(root).as_posix() for p in root.glob("*/*") if p.is_file())


def labelled_images(root):
    """(relative path, label) of every file of an ImageFolder tree, in the
    dataset's order, labelled by its class folder's index in sorted order
    (as DatasetIndex::LoadImageFolder labels them)."""
    root = Path(root)
    classes = sorted(d.name for d in root.iterdir() if d.is_dir())
    return [("%s/%s" % (c, f.name), label) for label, c in enumerate(classes)
            for f in sorted((root / c).iterdir(), key=lambda x: x.name)]


def write_url_list(path, urls):
    """`URL<TAB>index` lines: the label of each sample is its index."""
    Path(path).write_text("".join("%s\t%d\n" % (u, i) for i, u in enumerate(urls)))
    return Path(path)
