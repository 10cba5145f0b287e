"""The daemon as a service: the gRPC health check says SERVING (to a
client and to `conveyord --probe`), and SIGTERM
while a client is mid-stream ends the daemon with status 0 within a few
seconds while the client gets Unavailable instead of hanging; a clean
shutdown removes the --port-file the daemon wrote."""

import os
import queue
import signal
import subprocess
import threading
import time

import conveyor
from conveyor.daemon import SERVING, health_status
from conveyor_integration import CONVEYORD, daemon_config, scaled


def test_health_check_is_serving(daemon):
    for address in (daemon.unix, daemon.tcp):
        channel = conveyor.make_channel(address)
        try:
            assert health_status(channel, timeout=scaled(5)) == SERVING
        finally:
            channel.close()


def _probe(address):
    res = subprocess.run([str(CONVEYORD), "--probe", address], capture_output=True, text=True,
                         timeout=scaled(30))
    return res.returncode, res.stdout


def test_probe_says_serving_then_fails_once_the_daemon_is_gone(daemon_factory, dataset):
    root, _ = dataset
    d = daemon_factory(daemon_config(root), name="probe")
    for address in (d.unix, d.tcp):
        rc, out = _probe(address)
        assert (rc, out.strip()) == (0, address + ": SERVING"), out
    d.signal(signal.SIGTERM)
    assert d.wait(timeout=scaled(15)) == 0, d.log()
    rc, out = _probe(d.unix)
    assert rc == 1 and out.startswith(d.unix + ": health check failed"), out


def test_port_file_is_removed_on_clean_shutdown(daemon_factory, dataset):
    root, _ = dataset
    d = daemon_factory(daemon_config(root), name="portfile")
    assert os.path.exists(d.port_file) and d.port is not None
    d.signal(signal.SIGTERM)
    assert d.wait(timeout=scaled(15)) == 0, d.log()
    assert not os.path.exists(d.port_file), "port file left behind: %s" % d.port_file


def test_sigterm_mid_stream_exits_zero_and_client_sees_unavailable(daemon_factory, dataset):
    root, _ = dataset
    d = daemon_factory(daemon_config(root), name="sigterm")
    stream = conveyor.open_stream(d.unix, "train", 8, num_epochs=0, credits=2)
    first = next(stream)
    assert first.num_samples == 8

    outcome = queue.Queue()
    flowing = threading.Event()

    def consume():
        # Keeps reading (releasing as it goes) until the stream fails.
        try:
            for i, _ in enumerate(stream):
                if i == 3:
                    flowing.set()
            outcome.put(("ended", None))
        except BaseException as e:
            outcome.put(("error", e))
        finally:
            flowing.set()

    reader = threading.Thread(target=consume, daemon=True)
    reader.start()
    assert flowing.wait(scaled(30)), "the stream did not flow"
    assert outcome.empty(), outcome.get()
    t0 = time.monotonic()
    d.signal(signal.SIGTERM)
    rc = d.wait(timeout=scaled(15))
    exit_s = time.monotonic() - t0
    assert rc == 0, d.log()
    assert exit_s < scaled(10), "daemon took %.1f s to exit" % exit_s
    kind, err = outcome.get(timeout=scaled(15))  # the client must not hang
    assert kind == "error", "stream ended normally although the daemon went away"
    assert isinstance(err, conveyor.Unavailable), repr(err)
    stream.close()
