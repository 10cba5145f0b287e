"""A script that ends with streams, batches and loaders still around exits
promptly.

gRPC's Python call and channel objects take a lock of their own in their
finalizers, and gRPC's threads are daemon threads, frozen wherever they are
when the interpreter shuts down. A call collected then could wait for a lock
a frozen thread held: the README's lifetime snippet (batches kept in globals)
hung at exit, the first of a few runs against a release daemon. The client
closes what is still open in an atexit handler, while gRPC's threads still
run (conveyor/_exit.py), and drops each finished call at once.
"""

import subprocess
import sys

import pytest

import conveyor_integration as ci
from conveyor_integration import scaled

PRELUDE = """
import faulthandler, sys
faulthandler.dump_traceback_later(%d, exit=True)  # a hang prints its stacks
import conveyor
import numpy as np
"""

SCRIPTS = {
    # Batches kept in globals; both streams ended by the daemon; loaders closed.
    "kept_batches": """
with conveyor.Loader(None, pipeline="train", batch_size=16, credits=2) as loader:
    with loader.epoch(0) as stream:
        kept = [(b.images, b.images.copy()) for b in stream]
fast = conveyor.Loader(None, pipeline="train", batch_size=16, lifetime="fast")
for batch in fast.epoch(0):
    images = batch.images.copy()
fast.close()
""",
    # A stream left open mid-epoch with a batch held, its loader never closed.
    "open_stream": """
loader = conveyor.Loader(None, pipeline="train", batch_size=4, credits=3)
stream = loader.epoch(0)
first = next(stream)
images = first.images
""",
}


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_script_exits_with_client_objects_alive(daemon, name):
    env = ci.client_env()
    env["CONVEYOR_SERVER"] = daemon.unix
    limit = int(scaled(30))
    code = PRELUDE % limit + SCRIPTS[name]
    for attempt in range(10):
        try:
            r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                               text=True, timeout=limit + 15)
        except subprocess.TimeoutExpired:
            pytest.fail("%s: run %d did not exit" % (name, attempt))
        assert "Timeout" not in r.stderr, "%s: run %d hung at exit:\n%s" % (
            name, attempt, r.stderr[-4000:])
        assert r.returncode == 0, "%s: run %d exited %d:\n%s" % (
            name, attempt, r.returncode, r.stderr[-4000:])
