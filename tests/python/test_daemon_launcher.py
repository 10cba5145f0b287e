"""conveyor.daemon, the one launcher of conveyord (tests, benchmarks, demo):
its health check (gRPC's Health stub) against an in-process Health service,
a daemon that dies or never serves gives DaemonError with its log (not a
hang), and the command line runs a command against a real conveyord and
passes its exit status on."""

import os
import signal
import subprocess
import sys
import time

import pytest

SOURCE_DIR = os.environ.get("CONVEYOR_SOURCE_DIR") or os.path.dirname(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD_DIR = os.environ.get("CONVEYOR_BUILD_DIR") or os.path.join(SOURCE_DIR, "build")
CLIENT_DIR = os.path.join(SOURCE_DIR, "client", "python")
if CLIENT_DIR not in sys.path:
    sys.path.insert(0, CLIENT_DIR)
CONVEYORD = os.path.join(BUILD_DIR, "server", "conveyord")
PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable

from concurrent import futures  # noqa: E402

import grpc  # noqa: E402

from conveyor._stubs import health_grpc, health_pb  # noqa: E402
from conveyor.daemon import (NOT_SERVING, SERVING, DaemonError, DaemonProcess,  # noqa: E402
                             health_status, is_serving)


class _Health(health_grpc.HealthServicer):
    """A grpc.health.v1 service answering `status` for "" and
    SERVICE_UNKNOWN's NOT_FOUND for any other service name."""

    def __init__(self, status):
        self.status = status
        self.asked = []

    def Check(self, request, context):
        self.asked.append(request.service)
        if request.service:
            context.abort(grpc.StatusCode.NOT_FOUND, "unknown service %r" % request.service)
        return health_pb.HealthCheckResponse(status=self.status)


@pytest.fixture
def health_server(tmp_path):
    """An in-process gRPC server on a unix socket; returns (address, add)
    where add(status) installs a Health service answering `status`."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    address = "unix://%s" % (tmp_path / "health.sock")
    services = []

    def add(status):
        services.append(_Health(status))
        health_grpc.add_HealthServicer_to_server(services[-1], server)
        return services[-1]

    yield address, add, server
    server.stop(grace=None)


@pytest.mark.parametrize("status", [SERVING, NOT_SERVING])
def test_health_status_is_the_answer_of_grpcs_health_service(health_server, status):
    address, add, server = health_server
    service = add(status)
    server.add_insecure_port(address)
    server.start()
    assert health_status(address, timeout=10) == status
    assert is_serving(address, timeout=10) == (status == SERVING)
    assert service.asked == ["", ""]  # the whole server's status


def test_health_status_names_the_service_asked_about(health_server):
    address, add, server = health_server
    service = add(SERVING)
    server.add_insecure_port(address)
    server.start()
    with pytest.raises(grpc.RpcError) as e:
        health_status(address, timeout=10, service="conveyor.v1.Conveyor")
    assert e.value.code() == grpc.StatusCode.NOT_FOUND
    assert service.asked == ["conveyor.v1.Conveyor"]


def test_a_server_without_the_health_service_is_not_serving(health_server):
    address, _, server = health_server
    server.add_insecure_port(address)
    server.start()
    with pytest.raises(grpc.RpcError) as e:
        health_status(address, timeout=10)
    assert e.value.code() == grpc.StatusCode.UNIMPLEMENTED
    assert is_serving(address, timeout=10) is False


def _fake_binary(tmp_path, body):
    path = tmp_path / "fake-conveyord"
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(0o755)
    config = tmp_path / "c.yaml"
    config.write_text("threads: 1\n")
    return path, config


def test_a_daemon_that_exits_while_starting_raises_with_its_log(tmp_path):
    binary, config = _fake_binary(tmp_path, 'echo "config error: no pipelines" >&2; exit 2')
    d = DaemonProcess(binary, config, workdir=tmp_path / "w")
    t0 = time.monotonic()
    with pytest.raises(DaemonError, match=r"status 2(.|\n)*config error: no pipelines"):
        d.start(timeout=30)
    assert time.monotonic() - t0 < 10, "the exit was not noticed at once"


def test_a_daemon_that_never_serves_times_out_and_is_killed(tmp_path):
    binary, config = _fake_binary(tmp_path, "exec sleep 60")
    d = DaemonProcess(binary, config, workdir=tmp_path / "w")
    with pytest.raises(DaemonError, match="not SERVING within 0.5 s"):
        d.start(timeout=0.5)
    assert d.poll() is not None, "start() must not leave the process behind"


def test_stop_sends_sigterm_then_sigkill(tmp_path):
    # Ignores SIGTERM: stop() must fall back to SIGKILL after its grace period.
    ready = tmp_path / "trap-set"
    binary, config = _fake_binary(tmp_path, "trap '' TERM; touch %s; while :; do sleep 0.05; done"
                                  % ready)
    d = DaemonProcess(binary, config, workdir=tmp_path / "w").spawn()
    deadline = time.monotonic() + 30
    while not ready.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert ready.exists(), "the fake daemon did not start"
    assert d.stop(timeout=0.5) == -signal.SIGKILL


def test_command_line_runs_a_command_against_a_real_daemon(tmp_path):
    if not os.access(CONVEYORD, os.X_OK):
        pytest.skip("conveyord not built at %s" % CONVEYORD)
    from PIL import Image
    images = tmp_path / "images" / "a"
    images.mkdir(parents=True)
    Image.new("RGB", (40, 40), (200, 30, 30)).save(images / "0.jpg")
    config = tmp_path / "c.yaml"
    config.write_text("threads: 1\npipelines:\n  p:\n    dataset: {root: %s}\n    size: 32\n"
                      % (tmp_path / "images"))
    env = dict(os.environ, PYTHONPATH=CLIENT_DIR)  # the stubs: conveyor/_stub_path.py
    check = ("import conveyor, os, sys; "
             "names = [p.name for p in conveyor.list_pipelines(os.environ['CONVEYOR_SERVER'])]; "
             "print(names); sys.exit(7 if names == ['p'] else 1)")
    res = subprocess.run([PYTHON, "-m", "conveyor.daemon", "--conveyord", CONVEYORD,
                          "--config", str(config), "--", PYTHON, "-c", check],
                         capture_output=True, text=True, timeout=120, env=env)
    assert res.returncode == 7, (res.returncode, res.stdout, res.stderr)
    assert "['p']" in res.stdout
    assert "is serving on unix://" in res.stderr
