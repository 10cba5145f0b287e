"""Fixtures of the integration tests: real conveyord processes, small JPEG
datasets and the Python client.

Environment:
  CONVEYOR_BUILD_DIR   build folder holding server/conveyord and
                       tests/engine_dump (default /work/main/build). When it
                       is set (CTest sets it) a missing daemon fails the tests;
                       when it is not, they are skipped.
  CONVEYOR_SOURCE_DIR  the source tree (default: two folders up from here).

Every daemon is started on a unix socket in a temporary folder plus TCP on
127.0.0.1 port 0 (the port comes back through --port-file), waited for with
the gRPC health check (falling back to polling ListPipelines), never with a
fixed sleep, and killed at teardown whatever happened.
"""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

SOURCE_DIR = Path(os.environ.get("CONVEYOR_SOURCE_DIR", Path(__file__).resolve().parents[2]))
BUILD_DIR = Path(os.environ.get("CONVEYOR_BUILD_DIR", "/work/main/build"))
_BUILD_DIR_EXPLICIT = "CONVEYOR_BUILD_DIR" in os.environ
PYTHON = "/usr/bin/python3"  # Debian's interpreter: grpcio, numpy, torch
CLIENT_DIR = SOURCE_DIR / "client" / "python"
if str(CLIENT_DIR) not in sys.path:
    sys.path.insert(0, str(CLIENT_DIR))

import grpc  # noqa: E402

import conveyor  # noqa: E402
from conveyor._proto.v1 import conveyor_pb2 as pb  # noqa: E402
from conveyor._proto.v1 import conveyor_pb2_grpc as pb_grpc  # noqa: E402

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
def _health_status(channel, timeout):
    """grpc.health.v1 Check (raw bytes: grpc_health is not packaged here).
    Returns the status number (1 = SERVING) or raises grpc.RpcError."""
    check = channel.unary_unary("/grpc.health.v1.Health/Check",
                                request_serializer=lambda b: b,
                                response_deserializer=lambda b: b)
    raw = check(b"", timeout=timeout)
    # HealthCheckResponse { ServingStatus status = 1; }: field 1, varint.
    if not raw:
        return 0
    if raw[0] != 0x08:
        raise ValueError("unexpected health response %r" % raw)
    return raw[1]


class Daemon:
    """One conveyord process. Use start(), then .unix / .tcp addresses."""

    def __init__(self, workdir, config, threads=2, tcp=True, extra_args=()):
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.config_path = write_config(self.workdir / "conveyord.yaml", config)
        self.socket_path = self.workdir / "conveyor.sock"
        self.port_file = self.workdir / "port"
        self.log_path = self.workdir / "conveyord.log"
        self.threads = threads
        self.use_tcp = tcp
        self.extra_args = list(extra_args)
        self.proc = None
        self.port = None
        self.health_implemented = None

    @property
    def unix(self):
        return "unix://%s" % self.socket_path

    @property
    def tcp(self):
        return "127.0.0.1:%d" % self.port

    @property
    def pid(self):
        return self.proc.pid

    def command(self):
        cmd = [str(CONVEYORD), "--config", str(self.config_path), "--socket", str(self.socket_path),
               "--threads", str(self.threads)]
        if self.use_tcp:
            cmd += ["--tcp", "127.0.0.1:0", "--port-file", str(self.port_file)]
        return cmd + self.extra_args

    def start(self, timeout=30.0):
        require_daemon()
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self.command(), stdout=self._log, stderr=subprocess.STDOUT,
                                     cwd=self.workdir)
        self.wait_ready(timeout)
        return self

    def log(self):
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def wait_ready(self, timeout):
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("conveyord exited with %s during start:\n%s"
                                   % (self.proc.returncode, self.log()))
            try:
                if self.use_tcp and self.port is None:
                    text = self.port_file.read_text().strip() if self.port_file.exists() else ""
                    if not text:
                        raise FileNotFoundError("port file not written yet")
                    self.port = int(text)
                if self.socket_path.exists() and self.is_serving(timeout=1.0):
                    return
            except (OSError, ValueError, grpc.RpcError, conveyor.ConveyorError) as e:
                last = e
            time.sleep(0.02)
        raise RuntimeError("conveyord not ready within %.0f s (last: %s):\n%s"
                           % (timeout, last, self.log()))

    def is_serving(self, timeout=2.0, address=None):
        """True when the health check says SERVING (or, if the daemon has no
        health service, when ListPipelines answers)."""
        channel = grpc.insecure_channel(conveyor.loader.grpc_target(address or self.unix))
        try:
            if self.health_implemented is not False:
                try:
                    status = _health_status(channel, timeout)
                    self.health_implemented = True
                    return status == 1
                except grpc.RpcError as e:
                    if e.code() != grpc.StatusCode.UNIMPLEMENTED:
                        raise
                    self.health_implemented = False
            pb_grpc.ConveyorStub(channel).ListPipelines(pb.ListPipelinesRequest(), timeout=timeout)
            return True
        finally:
            channel.close()

    # /proc figures of the daemon
    def rss_bytes(self):
        with open("/proc/%d/status" % self.pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        raise RuntimeError("no VmRSS for pid %d" % self.pid)

    def fd_count(self):
        return len(os.listdir("/proc/%d/fd" % self.pid))

    def signal(self, sig):
        self.proc.send_signal(sig)

    def wait(self, timeout):
        return self.proc.wait(timeout=timeout)

    def stop(self, timeout=10.0):
        """SIGTERM, then SIGKILL after `timeout`; returns the exit status."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        return self.proc.returncode

    def kill(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


# Sanitizer builds (tests/sanitizers/run_checked.sh sets CONVEYOR_SANITIZER):
# daemons are stopped with SIGTERM at teardown instead of killed, so that
# LeakSanitizer checks each one at its exit; run_checked.sh fails the test on
# any report.
SANITIZER = os.environ.get("CONVEYOR_SANITIZER", "")


def _teardown(d):
    if SANITIZER:
        d.stop(timeout=60.0)
    else:
        d.kill()


@pytest.fixture
def daemon_factory(tmp_path_factory):
    """Starts daemons for one test and always kills them at teardown:
    daemon_factory(config_dict, **Daemon kwargs) -> started Daemon."""
    started = []

    def start(config, name="daemon", **kwargs):
        d = Daemon(tmp_path_factory.mktemp(name), config, **kwargs)
        started.append(d)
        return d.start()

    yield start
    for d in started:
        _teardown(d)
        if getattr(d, "_log", None):
            d._log.close()


@pytest.fixture(scope="module")
def daemon(tmp_path_factory, dataset):
    """A daemon shared by the tests of one module, serving `train` and `eval`."""
    root, _ = dataset
    d = Daemon(tmp_path_factory.mktemp("daemon"), daemon_config(root))
    try:
        d.start()
        yield d
    finally:
        _teardown(d)
        if getattr(d, "_log", None):
            d._log.close()


# --- helpers -----------------------------------------------------------------
def wait_until(predicate, timeout, interval=0.05):
    """Polls predicate() until it is truthy (returned) or the deadline passes
    (returns the last value)."""
    deadline = time.monotonic() + timeout
    value = predicate()
    while not value and time.monotonic() < deadline:
        time.sleep(interval)
        value = predicate()
    return value


class Epoch:
    """What read_epoch collected: images, labels, indices, sizes (numpy),
    transport, end (StreamEnd), batches_per_epoch."""

    def __init__(self, **kw):
        self.__dict__.update(kw)


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
    subprocess.run(cmd, check=True, timeout=120)
    with np.load(out) as z:
        return {k: z[k] for k in z.files}


# --- training-semantics helpers (tests/integration/test_training_*.py) -------
@pytest.fixture
def restart_daemon():
    """restart_daemon(old) -> a new conveyord on `old`'s config, workdir and
    unix socket (the old process is killed first if it still runs), started
    and waited for; killed at teardown."""
    import threading

    started = []
    lock = threading.Lock()
    torn_down = [False]

    def restart(old, timeout=30.0):
        old.kill()
        if old.use_tcp:
            old.port_file.unlink(missing_ok=True)  # the new daemon writes its own port
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
    for d in daemons:
        _teardown(d)
        if getattr(d, "_log", None):
            d._log.close()


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
