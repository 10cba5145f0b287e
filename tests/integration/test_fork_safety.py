"""Fork safety of the Python client (conveyor/_fork.py): a torch DataLoader
worker forked while a conveyor stream is open in the parent reads its epoch,
under Debian's grpcio and under the newest grpcio from PyPI
(scripts/venvs/grpcio-newest.txt); where gRPC's fork support is off the
worker refuses at once with a message naming the "spawn" / "forkserver"
contexts; a worker never outlives its killed parent.

Each case runs tests/integration/fork_worker_check.py as a process of its
own under a hard timeout: a hang fails the test (and its whole process group
is killed), it never blocks the suite.
"""

import json
import os
import signal
import socket
import subprocess
import time

import pytest

from conveyor_integration import (PYTHON, SOURCE_DIR, client_env, scaled, venv_python,
                                  wait_for_child, wait_until)

CHECK = str(SOURCE_DIR / "tests" / "integration" / "fork_worker_check.py")
TRIES = 3
EPOCH_BATCHES = 12  # 48 samples in batches of 4: the parent's TorchLoader epoch


def _env(**overrides):
    env = client_env()
    # The pytest process imported conveyor, which put conveyor's own
    # GRPC_ENABLE_FORK_SUPPORT=1 in its environment: each case says its own.
    env.pop("GRPC_ENABLE_FORK_SUPPORT", None)
    for k, v in overrides.items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = v
    return env


def _run(python, args, env, timeout):
    """(exit status, the JSON lines, stderr) of fork_worker_check.py; a run
    past `timeout` s is killed with its process group and fails the test."""
    p = subprocess.Popen([python, CHECK] + args, env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        pytest.fail("hung: fork_worker_check.py did not finish within %.0f s\nstdout:\n%s\n"
                    "stderr:\n%s" % (timeout, out, err[-3000:]))
    lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    return p.returncode, lines, err


def _pypi_reachable():
    try:
        socket.create_connection(("pypi.org", 443), timeout=3).close()
        return True
    except OSError:
        return False


def _python(which):
    """Debian's interpreter (grpcio 1.51), or a venv with the newest grpcio
    (scripts/venv.sh grpcio-newest; skipped, saying why, only when it is not
    made yet and PyPI cannot be reached)."""
    if which == "debian":
        return PYTHON
    r = subprocess.run([str(SOURCE_DIR / "scripts" / "venv.sh"), "grpcio-newest"],
                       capture_output=True, text=True)
    if r.returncode != 0 and not _pypi_reachable():
        pytest.skip("the grpcio-newest venv is not made and PyPI is unreachable: "
                    "run scripts/venv.sh grpcio-newest where it is")
    return venv_python("grpcio-newest")  # fails the test with pip's output


@pytest.fixture(scope="module", params=["debian", "newest"])
def python(request):
    return _python(request.param)


def _grpc_version(python):
    r = subprocess.run([python, "-c", "import grpc; print(grpc.__version__)"],
                       capture_output=True, text=True, timeout=scaled(60), env=_env())
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def test_newest_grpcio_venv_is_not_debians():
    """The second interpreter really runs another grpcio (not Debian's
    leaking in through system-site-packages)."""
    newest = _grpc_version(_python("newest"))
    assert newest != _grpc_version(PYTHON)
    with open(SOURCE_DIR / "scripts" / "venvs" / "grpcio-newest.txt") as f:
        assert "grpcio==%s\n" % newest in f.read()


def _alive(pid):
    """True while `pid` runs (a zombie waiting for its reaper counts as gone)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state not in ("Z", "X")


def test_dataloader_worker_forked_with_a_stream_open_reads_its_epoch(daemon, python):
    """TRIES DataLoader workers, each forked while the parent's TorchLoader
    is mid-epoch, read the whole epoch (the same batches as a plain Loader),
    and the parent's stream goes on. Then one more worker holds a stream and
    the parent is killed (SIGKILL): the worker is gone within 2 s (torch's
    own check of the parent takes 5 s, and never runs while the worker is
    blocked in a call)."""
    p = subprocess.Popen([python, CHECK, daemon.unix, str(TRIES), "--hold"], env=_env(),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    lines, worker = [], None
    try:
        # A hang shows as a line that never comes: the alarm ends the wait.
        def hung(*_):
            raise TimeoutError("fork_worker_check.py hung")
        old = signal.signal(signal.SIGALRM, hung)
        signal.alarm(int(scaled(120)))
        try:
            for line in p.stdout:
                if line.startswith("WORKER "):
                    worker = int(line.split()[1])
                    break
                if line.startswith("{"):
                    lines.append(json.loads(line))
        except TimeoutError:
            pytest.fail("hung: %s (stderr: %s)" % (lines, _stderr_so_far(p)))
        finally:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, old)
        tries = [x for x in lines if "try" in x]
        assert len(tries) == TRIES, (lines, _stderr_so_far(p))
        for t in tries:
            assert t["error"] is None, t
            assert t["batches"] == 6 and t["same"], t
        # The parent's stream, open across every fork, read its whole epoch.
        assert lines[-1] == {"parent_batches": EPOCH_BATCHES}
        assert worker is not None and _alive(worker), _stderr_so_far(p)
        p.kill()
        p.wait(timeout=scaled(10))
        gone = wait_until(lambda: not _alive(worker), 2.0, interval=0.02)
        assert gone, "DataLoader worker %d outlived its killed parent" % worker
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        try:
            os.killpg(p.pid, signal.SIGKILL)  # whatever is left of this case's processes
        except ProcessLookupError:
            pass
        p.stdout.close()
        p.stderr.close()


def _stderr_so_far(p):
    """The end of the check's stderr, once its whole process group is gone (a
    worker left behind would hold the pipe open)."""
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    p.wait()
    return p.stderr.read()[-3000:]


@pytest.mark.parametrize("which,how", [("debian", "grpc_imported_first"),
                                       ("debian", "env_says_off"),
                                       ("newest", "grpc_imported_first")])
def test_worker_refuses_at_once_where_grpc_fork_support_is_off(daemon, which, how):
    """grpc imported before conveyor without GRPC_ENABLE_FORK_SUPPORT, or
    the environment turning it off: the worker raises FailedPrecondition at
    its first call (no hang), naming the contexts that work; the parent's
    stream is unharmed. (The environment's "0" under Debian's grpcio only:
    the same code path, one torch start less.)"""
    python = _python(which)
    if how == "grpc_imported_first":
        args, env = ["--grpc-first"], _env()
    else:
        args, env = [], _env(GRPC_ENABLE_FORK_SUPPORT="0")
    started = time.monotonic()
    rc, lines, err = _run(python, [daemon.unix, "1"] + args, env, scaled(90))
    assert rc == 0, err[-3000:]
    (t,) = [x for x in lines if "try" in x]
    assert t["error"] is not None and t["batches"] == 0, t
    assert "FailedPrecondition" in t["error"] or "conveyor:" in t["error"], t
    assert 'multiprocessing_context="spawn"' in t["error"] and '"forkserver"' in t["error"], t
    assert "GRPC_ENABLE_FORK_SUPPORT" in t["error"], t
    assert lines[-1] == {"parent_batches": EPOCH_BATCHES}
    # Refused at once: well inside the DataLoader's 60 s timeout.
    assert time.monotonic() - started < scaled(45)


def test_a_plain_fork_with_a_tcp_stream_open_leaves_the_parents_stream_alone(daemon):
    """os.fork() while a data-socket stream (TCP) is open, in this process: the
    child drops and collects the inherited stream, reads an epoch over TCP
    on connections of its own, and the parent's stream (its gRPC call and
    its data socket) reads on to its end with the right batches."""
    import gc

    import conveyor
    from conveyor import _fork

    assert _fork.fork_support_active(), "conveyor was imported before grpc: fork support is on"
    ref = [b.labels.tolist() for b in conveyor.Loader(daemon.tcp, pipeline="train",
                                                       batch_size=4, seed=5).epoch(0)]
    loader = conveyor.Loader(daemon.tcp, pipeline="train", batch_size=4, seed=5)
    stream = loader.epoch(0)
    assert stream.transport == "data_socket"
    got = [next(stream).labels.tolist() for _ in range(2)]
    pid = os.fork()
    if pid == 0:  # the child: never return into pytest
        code = 3
        try:
            signal.alarm(int(scaled(60)))  # a hang ends the child, which fails the test
            del stream
            gc.collect()
            n = sum(b.num_samples for b in loader.epoch(1))
            code = 0 if n == 48 else 2
        finally:
            os._exit(code)
    assert wait_for_child(pid, 90, "the forked child's epoch") == 0
    got += [b.labels.tolist() for b in stream]
    assert got == ref
    loader.close()
