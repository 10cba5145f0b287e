"""conveyor.daemon, the one launcher of conveyord (tests, benchmarks, demo):
the health-check decoder on hand-made answers, a daemon that dies or never
serves gives DaemonError with its log (not a hang), and the command line
runs a command against a real conveyord and passes its exit status on."""

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

from conveyor.daemon import (SERVING, DaemonError, DaemonProcess,  # noqa: E402
                             decode_health_response)


@pytest.mark.parametrize("raw,status", [
    (b"", 0),                                  # proto3 default: UNKNOWN
    (b"\x08\x01", SERVING),
    (b"\x08\x02", 2),                          # NOT_SERVING
    (b"\x12\x03abc\x08\x01", SERVING),         # an unknown string field first
    (b"\x08\x02\x08\x01", SERVING),            # the last value of a repeated field wins
    (b"\x19" + bytes(8) + b"\x08\x03", 3),     # a fixed64 field skipped
])
def test_health_response_decoding(raw, status):
    assert decode_health_response(raw) == status


@pytest.mark.parametrize("raw", [b"\x08", b"\x12\x05ab", b"\x08\x81"])
def test_truncated_health_response_is_an_error(raw):
    with pytest.raises(ValueError):
        decode_health_response(raw)


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
    env = dict(os.environ, PYTHONPATH=CLIENT_DIR)
    check = ("import conveyor, os, sys; "
             "names = [p.name for p in conveyor.list_pipelines(os.environ['CONVEYOR_SERVER'])]; "
             "print(names); sys.exit(7 if names == ['p'] else 1)")
    res = subprocess.run([PYTHON, "-m", "conveyor.daemon", "--conveyord", CONVEYORD,
                          "--config", str(config), "--", PYTHON, "-c", check],
                         capture_output=True, text=True, timeout=120, env=env)
    assert res.returncode == 7, (res.returncode, res.stdout, res.stderr)
    assert "['p']" in res.stdout
    assert "is serving on unix://" in res.stderr
