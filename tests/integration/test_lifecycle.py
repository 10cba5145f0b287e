"""The daemon as a service: the gRPC health check says SERVING, and SIGTERM
while a client is mid-stream ends the daemon with status 0 within a few
seconds while the client gets Unavailable instead of hanging."""

import queue
import signal
import threading
import time

import grpc

import conveyor
from conveyor_integration import _health_status, daemon_config


def test_health_check_is_serving(daemon):
    for address in (daemon.unix, daemon.tcp):
        channel = grpc.insecure_channel(conveyor.loader.grpc_target(address))
        try:
            assert _health_status(channel, timeout=5) == 1  # SERVING
        finally:
            channel.close()


def test_sigterm_mid_stream_exits_zero_and_client_sees_unavailable(daemon_factory, dataset):
    root, _ = dataset
    d = daemon_factory(daemon_config(root), name="sigterm")
    stream = conveyor.open_stream(d.unix, "train", 8, num_epochs=0, credits=2)
    first = next(stream)
    assert first.num_samples == 8

    outcome = queue.Queue()

    def consume():
        # Keeps reading (releasing as it goes) until the stream fails.
        try:
            for _ in stream:
                time.sleep(0.01)
            outcome.put(("ended", None))
        except BaseException as e:
            outcome.put(("error", e))

    reader = threading.Thread(target=consume, daemon=True)
    reader.start()
    time.sleep(0.2)  # the stream is flowing
    t0 = time.monotonic()
    d.signal(signal.SIGTERM)
    rc = d.wait(timeout=15)
    exit_s = time.monotonic() - t0
    assert rc == 0, d.log()
    assert exit_s < 10, "daemon took %.1f s to exit" % exit_s
    kind, err = outcome.get(timeout=15)  # the client must not hang
    assert kind == "error", "stream ended normally although the daemon went away"
    assert isinstance(err, conveyor.Unavailable), repr(err)
    stream.close()
