"""Fixtures of the integration tests: real conveyord processes, small JPEG
datasets and the Python client.

Environment:
  CONVEYOR_BUILD_DIR   build folder holding server/conveyord and
                       tests/engine_dump (default: build/ of the source tree). When it
                       is set (CTest sets it) a missing daemon fails the tests;
                       when it is not, they are skipped.
  CONVEYOR_SOURCE_DIR  the source tree (default: two folders up from here).

  CONVEYOR_TEST_TIMEOUT_SCALE  factor for every deadline (default 1): CI
                       sets it when conveyord is built with a sanitizer.

Every daemon is started through conveyor.daemon (the project's one launcher)
on a unix socket in a temporary folder plus TCP on 127.0.0.1 port 0 (the port
comes back through --port-file), waited for with the gRPC health check, never
with a fixed sleep, and stopped at teardown whatever happened (SIGTERM, then
SIGKILL); a sanitizer report in its log fails the test. Absolute RSS checks
are skipped when the daemon is sanitized (daemon_sanitizer()).
"""

import contextlib
import io
import json
import os
import re
import resource
import subprocess
import sys
import tarfile
import threading
import time
from pathlib import Path

import numpy as np
import pytest

SOURCE_DIR = Path(os.environ.get("CONVEYOR_SOURCE_DIR", Path(__file__).resolve().parents[2]))
BUILD_DIR = Path(os.environ.get("CONVEYOR_BUILD_DIR", SOURCE_DIR / "build"))
_BUILD_DIR_EXPLICIT = "CONVEYOR_BUILD_DIR" in os.environ
PYTHON = "/usr/bin/python3"  # Debian's interpreter: grpcio, numpy, torch
CLIENT_DIR = SOURCE_DIR / "client" / "python"
if str(CLIENT_DIR) not in sys.path:
    sys.path.insert(0, str(CLIENT_DIR))

import conveyor  # noqa: E402
from conveyor._proto.v1 import conveyor_pb2 as pb  # noqa: E402,F401  (tests import them)
from conveyor._proto.v1 import conveyor_pb2_grpc as pb_grpc  # noqa: E402,F401
from conveyor.daemon import DaemonProcess  # noqa: E402

# Test modules import these helpers as `conveyor_integration`, a name of their
# own: with several test folders in one pytest run, each with a conftest.py,
# `import conftest` could hand them another folder's module.
sys.modules["conveyor_integration"] = sys.modules[__name__]

CONVEYORD = BUILD_DIR / "server" / "conveyord"
ENGINE_DUMP = BUILD_DIR / "tests" / "engine_dump"
CLI = CLIENT_DIR / "bin" / "conveyor"

# The pipeline the tests read: small outputs keep the suite fast on 2 cores.
IMAGE_SIZE = 64
MAX_BATCH = 64


def venv_python(name):
    """The interpreter of the cached virtual environment NAME
    (scripts/venvs/NAME.txt, created on first use by scripts/venv.sh) for
    what only PyPI has. Fails the test, with pip's output, when it cannot be
    made: the suite's dependencies are part of the suite."""
    r = subprocess.run([str(SOURCE_DIR / "scripts" / "venv.sh"), name], capture_output=True,
                       text=True)
    if r.returncode != 0:
        pytest.fail(f"scripts/venv.sh {name} failed ({r.returncode}):\n{r.stderr[-4000:]}")
    return r.stdout.strip().splitlines()[-1]


def require_daemon():
    if not CONVEYORD.exists():
        msg = "conveyord not built at %s (set CONVEYOR_BUILD_DIR)" % CONVEYORD
        if _BUILD_DIR_EXPLICIT:
            pytest.fail(msg)
        pytest.skip(msg)


def client_env():
    """Environment for subprocesses that import the client."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(CLIENT_DIR)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.pop("RANK", None)
    env.pop("WORLD_SIZE", None)
    return env


# --- datasets ----------------------------------------------------------------
def _natural_image(rng, w, h):
    """A smooth-ish picture with a few shapes and sensor-like noise."""
    from PIL import Image, ImageDraw, ImageFilter

    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    base = np.empty((h, w, 3), np.float32)
    for c in range(3):
        a, b, ph = rng.uniform(0.01, 0.08, 2).tolist() + [rng.uniform(0, 6.28)]
        base[..., c] = 128 + 90 * np.sin(a * xx + b * yy + ph) * rng.uniform(0.4, 1.0)
    img = Image.fromarray(np.clip(base, 0, 255).astype(np.uint8))
    draw = ImageDraw.Draw(img)
    for _ in range(int(rng.integers(2, 6))):
        x0, y0 = int(rng.integers(0, w - 8)), int(rng.integers(0, h - 8))
        x1, y1 = x0 + int(rng.integers(6, w // 2 + 8)), y0 + int(rng.integers(6, h // 2 + 8))
        color = tuple(int(v) for v in rng.integers(0, 256, 3))
        if rng.random() < 0.5:
            draw.ellipse([x0, y0, x1, y1], fill=color)
        else:
            draw.rectangle([x0, y0, x1, y1], fill=color)
    img = img.filter(ImageFilter.GaussianBlur(radius=float(rng.uniform(0.5, 1.5))))
    arr = np.asarray(img).astype(np.int16) + rng.normal(0, 8, (h, w, 3)).astype(np.int16)
    return Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8))


def make_image_folder(root, classes=3, per_class=16, seed=0, min_side=72, max_side=160):
    """ImageFolder root/<class>/<i>.jpg; returns (root, [(relpath, label)] in
    DatasetIndex order: class folders sorted, then file names sorted)."""
    rng = np.random.default_rng(seed)
    root = Path(root)
    names = sorted("class_%s" % chr(ord("a") + i) for i in range(classes))
    samples = []
    for label, name in enumerate(names):
        (root / name).mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            w, h = (int(v) for v in rng.integers(min_side, max_side + 1, 2))
            rel = "%s/img_%03d.jpg" % (name, i)
            _natural_image(rng, w, h).save(root / rel, quality=int(rng.integers(85, 96)))
            samples.append((rel, label))
    samples.sort(key=lambda s: (s[1], s[0].split("/")[1]))
    return root, samples


@pytest.fixture(scope="session")
def dataset(tmp_path_factory):
    """48 JPEGs in 3 classes: (root, samples)."""
    return make_image_folder(tmp_path_factory.mktemp("data") / "images", classes=3, per_class=16)


# --- config ------------------------------------------------------------------
def _yaml(value, indent=0):
    pad = "  " * indent
    if isinstance(value, dict):
        lines = []
        for k, v in value.items():
            if isinstance(v, (dict, list)) and v:
                lines.append("%s%s:" % (pad, k))
                lines.append(_yaml(v, indent + 1))
            else:
                lines.append("%s%s: %s" % (pad, k, _scalar(v)))
        return "\n".join(lines)
    if isinstance(value, list):
        return "\n".join("%s- %s" % (pad, _scalar(v)) for v in value)
    return pad + _scalar(value)


def _scalar(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return str(v)
    if isinstance(v, (list, dict)) and not v:
        return "[]" if isinstance(v, list) else "{}"
    s = str(v)
    return '"%s"' % s.replace("\\", "\\\\").replace('"', '\\"')


def pipeline_entry(root, **overrides):
    entry = {"dataset": {"root": str(root)}, "augment": "train", "size": IMAGE_SIZE,
             "layout": "nchw", "dtype": "uint8", "max_batch_size": MAX_BATCH,
             "error_policy": "skip"}
    entry.update(overrides)
    return entry


def daemon_config(dataset_root, pipelines=None, **daemon_fields):
    """A config dict: pipelines `train` (train augment) and `eval` by default."""
    cfg = {"threads": 2, "memory_budget": "256MiB", "max_streams": 128,
           "allowed_roots": [str(Path(dataset_root).parent)]}
    cfg.update(daemon_fields)
    cfg["pipelines"] = pipelines if pipelines is not None else {
        "train": pipeline_entry(dataset_root),
        # engine_dump's eval resizes the shorter side to 256 (TransformSpec's
        # default); the config's default is size * 256/224, so name it.
        "eval": pipeline_entry(dataset_root, augment="eval", resize_size=256),
    }
    return cfg


def write_config(path, cfg):
    """Writes a config dict as YAML (or a str verbatim); returns the path."""
    path = Path(path)
    path.write_text(cfg if isinstance(cfg, str) else _yaml(cfg) + "\n")
    return path


# --- daemon ------------------------------------------------------------------
# How much slower than a plain Release build the daemon may be: CI sets
# CONVEYOR_TEST_TIMEOUT_SCALE for sanitizer builds (ASan ~3x, TSan ~10x).
# Every deadline of the integration tests goes through scaled().
TIMEOUT_SCALE = float(os.environ.get("CONVEYOR_TEST_TIMEOUT_SCALE") or 1.0)


def scaled(seconds):
    """A deadline of `seconds` on an idle machine, scaled for slow builds."""
    return seconds * TIMEOUT_SCALE


_SANITIZER_MARKERS = ((b"__asan_init", "address"), (b"__tsan_init", "thread"),
                      (b"__ubsan_handle_", "undefined"))
_sanitizer_cache = {}


def daemon_sanitizer():
    """The sanitizer conveyord was built with ("address", "thread",
    "undefined") or None: read from the binary's symbol names (the one
    mechanism the tests use; a sanitized daemon's RSS says nothing about
    leaks: shadow memory, quarantine)."""
    if "value" not in _sanitizer_cache:
        found = None
        if CONVEYORD.exists():
            data = CONVEYORD.read_bytes()
            found = next((name for marker, name in _SANITIZER_MARKERS if marker in data), None)
        _sanitizer_cache["value"] = found
    return _sanitizer_cache["value"]


def skip_rss_check_if_sanitized(what="absolute RSS check"):
    """True (and prints why) when RSS checks must be skipped: call it before
    an RSS assertion and leave the assertion out when it answers True."""
    san = daemon_sanitizer()
    if san:
        print("%s skipped: conveyord is built with the %s sanitizer" % (what, san))
    return bool(san)


# What sanitizers print: ASan/LSan/TSan reports and UBSan's runtime errors.
_SANITIZER_REPORT = re.compile(
    r"^(==\d+==ERROR: \w*Sanitizer.*|WARNING: ThreadSanitizer.*|.*: runtime error: .*)$", re.M)


def sanitizer_report(log):
    """The first sanitizer report line of a daemon log and what follows (up
    to 40 lines), or None."""
    m = _SANITIZER_REPORT.search(log)
    return None if m is None else "\n".join(log[m.start():].splitlines()[:40])


def finish_daemons(daemons):
    """Test teardown: stops every daemon with SIGTERM (SIGKILL if it hangs),
    so that a sanitized one runs its exit checks (LeakSanitizer's among
    them), then fails the test if any log holds a sanitizer report."""
    for d in daemons:
        d.stop(timeout=scaled(10))
    reports = [(d, sanitizer_report(d.log())) for d in daemons]
    reports = [(d, r) for d, r in reports if r]
    if reports:
        pytest.fail("\n\n".join("conveyord (pid %d, log %s) reported:\n%s" % (d.pid, d.log_path, r)
                                for d, r in reports), pytrace=False)


class Daemon(DaemonProcess):
    """One conveyord process for a test: on a unix socket in `workdir` plus
    TCP on 127.0.0.1 port 0 (unless tcp=False), with /proc figures of the
    process. Use start(), then .unix / .tcp addresses."""

    def __init__(self, workdir, config, threads=2, tcp=True, extra_args=()):
        workdir = Path(workdir)
        workdir.mkdir(parents=True, exist_ok=True)
        write_config(workdir / "conveyord.yaml", config)
        super().__init__(CONVEYORD, workdir / "conveyord.yaml", workdir=workdir,
                         tcp="127.0.0.1:0" if tcp else None, threads=threads,
                         extra_args=extra_args)
        self.workdir = workdir
        self.config_path = Path(self.config_path)
        self.socket_path = Path(self.socket_path)
        self.use_tcp = tcp

    def start(self, timeout=30.0):
        require_daemon()
        return super().start(scaled(timeout))

    def idle(self):
        """True when the daemon's own accounting (GetStats) has no stream
        open and no slot memory reserved."""
        st = conveyor.stats(self.unix)
        return st.streams_open == 0 and st.slot_bytes_in_use == 0

    # /proc figures of the daemon
    def rss_bytes(self):
        with open("/proc/%d/status" % self.pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        raise RuntimeError("no VmRSS for pid %d" % self.pid)

    def fd_count(self):
        return len(os.listdir("/proc/%d/fd" % self.pid))

    def memfd_mappings(self):
        """Mappings of the daemon's stream memfds (/memfd:conveyor-stream-N):
        a sorted list of the stream names with a mapping, one entry per
        mapping (one per open slot arena)."""
        out = []
        with open("/proc/%d/maps" % self.pid) as f:
            for line in f:
                i = line.find("/memfd:conveyor-stream-")
                if i >= 0:
                    out.append(line[i + len("/memfd:"):].split()[0])
        return sorted(out)


@pytest.fixture
def daemon_factory(tmp_path_factory):
    """Starts daemons for one test and always stops them at teardown
    (finish_daemons): daemon_factory(config_dict, **Daemon kwargs) -> started
    Daemon."""
    started = []

    def start(config, name="daemon", **kwargs):
        d = Daemon(tmp_path_factory.mktemp(name), config, **kwargs)
        started.append(d)
        return d.start()

    yield start
    finish_daemons(started)


@pytest.fixture(scope="module")
def daemon(tmp_path_factory, dataset):
    """A daemon shared by the tests of one module, serving `train` and `eval`."""
    root, _ = dataset
    d = Daemon(tmp_path_factory.mktemp("daemon"), daemon_config(root))
    try:
        d.start()
        yield d
    finally:
        finish_daemons([d])


# --- helpers -----------------------------------------------------------------
def wait_until(predicate, timeout, interval=0.02):
    """Polls predicate() until it is truthy (returned) or the deadline
    (`timeout` s, scaled()) passes (returns the last value)."""
    deadline = time.monotonic() + scaled(timeout)
    value = predicate()
    while not value and time.monotonic() < deadline:
        time.sleep(interval)
        value = predicate()
    return value


def wait_for_child(pid, timeout, what="the forked child"):
    """Waits up to `timeout` s (scaled()) for child `pid` to exit and returns
    its exit code; a child still running then is killed and the test fails
    naming `what`."""
    status = []

    def reaped():
        got, st = os.waitpid(pid, os.WNOHANG)
        if got == pid:
            status.append(st)
        return bool(status)

    if not wait_until(reaped, timeout, interval=0.02):
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        pytest.fail("%s did not finish in %s s" % (what, timeout))
    return os.waitstatus_to_exitcode(status[0])


NOBODY = 65534  # the uid (and gid) of nobody/nogroup on Debian


@pytest.fixture
def group_shared_dir():
    """A folder in /tmp that only root and group nogroup may enter (pytest's
    own folders are root-only), setgid so the sockets made in it are of that
    group too: for tests that connect as a second uid."""
    import shutil
    import tempfile
    d = tempfile.mkdtemp(prefix="conveyor-group-", dir="/tmp")
    os.chown(d, 0, NOBODY)
    os.chmod(d, 0o2750)
    yield Path(d)
    shutil.rmtree(d, ignore_errors=True)


@contextlib.contextmanager
def fd_limited_daemon(workdir, cfg, fd_limit):
    """A conveyord (unix socket in `workdir`, TCP 127.0.0.1 port 0, 2
    threads) whose RLIMIT_NOFILE is `fd_limit` (soft and hard, set in the
    child before exec, so the daemon cannot raise it): yields (process,
    unix address, TCP port, log path); killed on the way out. For the tests
    of what a daemon does when its fds run short."""
    require_daemon()
    workdir = Path(workdir)
    config = write_config(workdir / "conveyord.yaml", cfg)
    sock = workdir / "conveyor.sock"
    port_file = workdir / "port"
    log_path = workdir / "conveyord.log"

    def limit_fds():
        resource.setrlimit(resource.RLIMIT_NOFILE, (fd_limit, fd_limit))

    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            [str(CONVEYORD), "--config", str(config), "--socket", str(sock), "--threads", "2",
             "--tcp", "127.0.0.1:0", "--port-file", str(port_file)],
            stdout=log, stderr=subprocess.STDOUT, cwd=workdir, preexec_fn=limit_fds)
    try:
        def ready():
            if proc.poll() is not None:
                raise RuntimeError("conveyord exited with %s during start:\n%s"
                                   % (proc.returncode, log_path.read_text(errors="replace")))
            if not port_file.exists() or not port_file.read_text().strip() or not sock.exists():
                return False
            try:
                conveyor.list_pipelines("unix://%s" % sock, timeout=2.0)
                return True
            except conveyor.ConveyorError:
                return False

        assert wait_until(ready, 30.0), "conveyord not ready:\n" + log_path.read_text()
        yield proc, "unix://%s" % sock, int(port_file.read_text()), log_path
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


class Epoch:
    """What read_epoch collected: images, labels, indices, sizes (numpy),
    transport, end (StreamEnd), batches_per_epoch."""

    def __init__(self, **kw):
        self.__dict__.update(kw)


class EndlessReader(threading.Thread):
    """Reads an endless stream of `pipeline` as fast as it can on a thread
    of its own, counting the images delivered, until stop(); an error is
    kept in `error` for the test. `loader_args` go to conveyor.Loader
    (token=..., seed=...)."""

    def __init__(self, address, pipeline="train", batch_size=8, credits=4, **loader_args):
        super().__init__(daemon=True)
        self.loader = conveyor.Loader(address, pipeline=pipeline, batch_size=batch_size,
                                      credits=credits, **loader_args)
        self.images = 0
        self.error = None
        self._halt = threading.Event()

    def run(self):
        try:
            with self.loader.stream(num_epochs=0) as stream:
                for batch in stream:
                    self.images += batch.num_samples
                    if self._halt.is_set():
                        return
        except Exception as e:  # noqa: BLE001 (reported by the test)
            if not self._halt.is_set():
                self.error = e

    def stop(self):
        self._halt.set()
        self.join(scaled(30))
        self.loader.close()


def read_epoch(address, pipeline="train", batch_size=8, seed=0, epoch=0, rank=0, world_size=1,
               credits=4, transport="auto", **kwargs):
    """One epoch through the Python client, images copied out of each batch."""
    loader = conveyor.Loader(address, pipeline=pipeline, batch_size=batch_size, rank=rank,
                             world_size=world_size, seed=seed, credits=credits,
                             transport=transport, **kwargs)
    images, labels, indices, sizes = [], [], [], []
    try:
        with loader.epoch(epoch) as stream:
            for batch in stream:
                images.append(batch.images.copy())
                labels.append(batch.labels)
                indices.append(batch.indices)
                sizes.append(batch.num_samples)
            assert stream.end is not None, "stream ended without StreamEnd"
    finally:
        loader.close()
    return Epoch(images=np.concatenate(images), labels=np.concatenate(labels),
                 indices=np.concatenate(indices), sizes=np.array(sizes),
                 transport=stream.transport, end=stream.end,
                 batches_per_epoch=stream.batches_per_epoch)


def engine_dump(root, out, batch_size=8, seed=0, epoch=0, rank=0, world_size=1,
                augment="train", size=IMAGE_SIZE):
    """The in-process engine's epoch (npz dict), or pytest.skip if the tool
    has not been built."""
    if not ENGINE_DUMP.exists():
        pytest.skip("engine_dump not built at %s" % ENGINE_DUMP)
    cmd = [str(ENGINE_DUMP), "--root", str(root), "--batch-size", str(batch_size), "--seed",
           str(seed), "--epoch", str(epoch), "--rank", str(rank), "--world-size", str(world_size),
           "--augment", augment, "--size", str(size), "--out", str(out)]
    subprocess.run(cmd, check=True, timeout=scaled(120))
    with np.load(out) as z:
        return {k: z[k] for k in z.files}


# --- training-semantics helpers (tests/integration/test_training_*.py) -------
@pytest.fixture
def restart_daemon():
    """restart_daemon(old) -> a new conveyord on `old`'s config, workdir and
    unix socket (the old process is killed first if it still runs), started
    and waited for; stopped at teardown (finish_daemons)."""
    import threading

    started = []
    lock = threading.Lock()
    torn_down = [False]

    def restart(old, timeout=30.0):
        old.kill()  # the new daemon writes its own port file (spawn removes the old one)
        d = Daemon(old.workdir, old.config_path.read_text(), threads=old.threads,
                   tcp=old.use_tcp, extra_args=old.extra_args)
        with lock:
            # A restart from a test's helper thread after teardown must not
            # leave a daemon behind.
            if torn_down[0]:
                raise RuntimeError("restart_daemon called after the test ended")
            started.append(d)
        try:
            return d.start(timeout)
        finally:
            with lock:
                if torn_down[0]:
                    d.kill()

    yield restart
    with lock:
        torn_down[0] = True
        daemons = list(started)
    finish_daemons(daemons)


@pytest.fixture(scope="session")
def large_dataset(tmp_path_factory):
    """24 larger JPEGs (320-480 px) in 2 classes: decoding dominates, so
    throughput is the daemon's, not the Python client's."""
    return make_image_folder(tmp_path_factory.mktemp("large") / "images", classes=2,
                             per_class=12, seed=3, min_side=320, max_side=480)


def write_list_file(path, entries):
    """A dataset list file (`relative/path<TAB>label` lines); returns the path."""
    path = Path(path)
    path.write_text("".join("%s\t%d\n" % (rel, label) for rel, label in entries))
    return path


def collect(batches):
    """(indices, labels, images) concatenated from Batch objects or copies."""
    return (np.concatenate([b.indices for b in batches]),
            np.concatenate([b.labels for b in batches]),
            np.concatenate([b.images for b in batches]))


# --- tar shards ----------------------------------------------------------------
def add_tar_member(tar, name, data):
    """Adds a regular member `name` holding `data` (bytes) to an open tarfile."""
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def write_shards(root, samples, out_dir, per_shard=10, fmt=tarfile.GNU_FORMAT):
    """The folder's samples, in index order, as shards out_dir/shard-NNNNNN.tar
    of `per_shard` samples ("sampleNNNNNN.jpg" + ".cls"). Returns the paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for s in range(0, len(samples), per_shard):
        path = out_dir / ("shard-%06d.tar" % (s // per_shard))
        with tarfile.open(path, "w", format=fmt) as tar:
            for i, (rel, label) in enumerate(samples[s:s + per_shard]):
                key = "sample%06d" % (s + i)
                add_tar_member(tar, key + ".jpg", (root / rel).read_bytes())
                add_tar_member(tar, key + ".cls", b"%d" % label)
        paths.append(path)
    return paths


# The fields of write_field_shards' shards: a caption (at most 128 bytes),
# optional JSON metadata and the key.
CAPTION_FIELDS = [{"name": "caption", "member": "txt", "type": "text", "max_bytes": 128},
                  {"name": "meta", "member": "json", "type": "json", "required": False},
                  {"name": "key", "type": "key"}]


def write_field_shards(root, samples, out_dir, caption, meta, per_shard=10):
    """The folder's samples as shards for sample-field tests: key
    "sub/sNNNNNN", members .jpg, .cls, .txt (caption(i)) and, for samples
    whose number is not a multiple of 5 (an optional field), .json
    (json of meta(i, label)). Returns the paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for s in range(0, len(samples), per_shard):
        path = out_dir / ("shard-%06d.tar" % (s // per_shard))
        with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as tar:
            for i, (rel, label) in enumerate(samples[s:s + per_shard], start=s):
                key = "sub/s%06d" % i
                add_tar_member(tar, key + ".jpg", (root / rel).read_bytes())
                add_tar_member(tar, key + ".cls", b"%d" % label)
                add_tar_member(tar, key + ".txt", caption(i).encode())
                if i % 5:
                    add_tar_member(tar, key + ".json", json.dumps(meta(i, label)).encode())
        paths.append(path)
    return paths
