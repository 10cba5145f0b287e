"""One trainer, several daemons (Loader(servers=[...]), conveyor/_pool.py),
with real hosts on one machine: each remote daemon in a network namespace
of its own, reached over a veth pair with TLS (tests/integration/netns_hosts.py;
skipped, and said so, where namespaces cannot be made).

Pinned here:
- 1 local + 2 remote daemons deliver every batch exactly once, in order,
  byte-identical to one daemon's stream, for an image folder and for tar
  shards, and every daemon serves ranges;
- a remote daemon killed (-9), another stopped (SIGSTOP) and a third
  drained (SIGTERM) mid-epoch, each while it holds a range: the epoch still
  completes exactly once, byte-identical;
- a daemon joining mid-epoch (the name's /etc/hosts answer grows) gets work;
- a daemon whose dataset or pipeline differs is refused, naming the part;
- a state_dict taken with 3 daemons resumes on 1, and the reverse;
- OpenStream.max_batches with a resume serves exactly a range of batches,
  and ListPipelines reports the fingerprint;
- `conveyor fetch --also-server` writes what one daemon gives;
- the C++ client's PoolStream (fetch_batches --also-server; plaintext TCP,
  so on loopback) is byte-identical to one daemon, also with a daemon killed
  and another stopped mid-epoch.
"""

import hashlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import warnings

import pytest

import conveyor
import netns_hosts
from conveyor_integration import (BUILD_DIR, PYTHON, Daemon, client_env, collect, daemon_config,
                                  finish_daemons, pipeline_entry, scaled,
                                  write_list_file, write_shards)
from pki_files import make_ca, make_cert

SEED = 7
BATCH = 2
NAME = "pool.test"  # the name remote daemons' certificates carry (and /etc/hosts gives)
PORT = 7171         # remote daemons listen on it, each in its own namespace


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    folder = tmp_path_factory.mktemp("pool-pki")
    make_ca(folder, "ca")
    cert, key = make_cert(folder, "server", "ca", "conveyord",
                          "subjectAltName=DNS:%s,IP:127.0.0.1\nextendedKeyUsage=serverAuth" % NAME)
    return {"ca": folder / "ca.pem", "cert": cert, "key": key}


@pytest.fixture
def net():
    why = netns_hosts.available()
    if why is not None:
        pytest.skip(why)
    hosts = netns_hosts.Hosts("pool")
    yield hosts
    hosts.close()


class NsDaemon(Daemon):
    """A daemon in network namespace `ns`, on TCP at `ip`:PORT with TLS
    (its unix socket still works from here: a path is not per namespace)."""

    def __init__(self, workdir, config, net, ns, ip):
        super().__init__(workdir, config)
        self.tcp_listen = "%s:%d" % (ip, PORT)
        self._prefix = net.prefix(ns)

    def command(self):
        return self._prefix + super().command()


@pytest.fixture
def daemons():
    started = []

    def start(d):
        started.append(d)
        return d.start()

    yield start
    for d in started:  # a stopped daemon must run again to stop
        if d.proc is not None and d.proc.poll() is None:
            os.kill(d.pid, signal.SIGCONT)
    finish_daemons(started)


def tls_cfg(cfg, pki):
    cfg = dict(cfg)
    cfg["listen"] = {"tls": {"cert": str(pki["cert"]), "key": str(pki["key"])}}
    return cfg


def security(pki):
    return dict(tls_ca=str(pki["ca"]), tls_server_name=NAME)


def reference(address, pipeline="train", epochs=2, world_size=1, rank=0):
    loader = conveyor.Loader(address, pipeline=pipeline, batch_size=BATCH, seed=SEED,
                             rank=rank, world_size=world_size)
    with loader.stream(num_epochs=epochs, first_epoch=0) as stream:
        ref = [b.copy() for b in stream]
    loader.close()
    return ref


def same_batches(got, ref):
    assert len(got) == len(ref)
    assert ([(b.epoch, b.batch_in_epoch, b.position, b.offset, b.end_of_epoch) for b in got]
            == [(b.epoch, b.batch_in_epoch, b.position, b.offset, b.end_of_epoch) for b in ref])
    gi, gl, gx = collect(got)
    ri, rl, rx = collect(ref)
    assert gi.tolist() == ri.tolist(), "samples differ from one daemon's stream"
    assert gl.tolist() == rl.tolist()
    assert gx.tobytes() == rx.tobytes(), "pixels differ from one daemon's stream"


def remote(tmp_path, net, pki, cfg, daemons, name):
    """A daemon with TLS in a namespace of its own, linked to this one."""
    ns = net.add(name)
    _, ip = net.link(None, ns)
    return daemons(NsDaemon(tmp_path / name, tls_cfg(cfg, pki), net, ns, ip))


def remote_pair(tmp_path, net, pki, cfg, daemons):
    """Two daemons in namespaces of their own, linked to this one."""
    return [remote(tmp_path, net, pki, cfg, daemons, name) for name in ("r1", "r2")]


def daemon_states(stream):
    return {d["address"]: d for d in stream.stats()["daemons"]}


def served(stream):
    return {d["address"]: d["ranges"] for d in stream.stats()["daemons"]}


@pytest.mark.parametrize("kind", ["folder", "shards"])
def test_three_daemons_deliver_every_batch_once_byte_identical(tmp_path, dataset, net, pki,
                                                               daemons, kind):
    root, samples = dataset
    if kind == "shards":
        paths = write_shards(root, samples, tmp_path / "shards", per_shard=10)
        entry = pipeline_entry(root)
        entry["dataset"] = {"shards": [str(p) for p in paths], "shuffle_buffer": 5}
        cfg = daemon_config(root, pipelines={"train": entry},
                            allowed_roots=[str(root.parent), str(tmp_path)])
    else:
        cfg = daemon_config(root)
    local = daemons(Daemon(tmp_path / "local", cfg, tcp=False))
    r1, r2 = remote_pair(tmp_path, net, pki, cfg, daemons)
    ref = reference(local.unix, world_size=2, rank=1)

    loader = conveyor.Loader(servers=[local.unix, r1.tcp, r2.tcp], pipeline="train",
                             batch_size=BATCH, seed=SEED, rank=1, world_size=2,
                             pool=conveyor.PoolOptions(policy="balanced", range_batches=2,
                                                       ranges_ahead=1, streams_per_daemon=1),
                             **security(pki))
    got = []
    with loader.stream(num_epochs=2, first_epoch=0) as stream:
        for b in stream:
            got.append(b.copy())
        counts = served(stream)
        assert stream.refused == {}
    same_batches(got, ref)
    assert sum(counts.values()) == len(ref) // 2  # 2 batches per range, each once
    assert all(n >= 1 for n in counts.values()), counts
    assert loader.state_dict()["epoch"] == 2 and loader.state_dict()["offset"] == 0


def test_killed_stopped_and_drained_daemons_lose_no_batch(tmp_path, dataset, net, pki,
                                                           daemons):
    root, _ = dataset
    cfg = daemon_config(root)
    local = daemons(Daemon(tmp_path / "local", cfg, tcp=False))
    r1, r2 = remote_pair(tmp_path, net, pki, cfg, daemons)
    r3 = remote(tmp_path, net, pki, cfg, daemons, "r3")
    ref = reference(local.unix)

    loader = conveyor.Loader(servers=[local.unix, r1.tcp, r2.tcp, r3.tcp], pipeline="train",
                             batch_size=BATCH, seed=SEED,
                             pool=conveyor.PoolOptions(policy="balanced", range_batches=2,
                                                       ranges_ahead=1, streams_per_daemon=1,
                                                       stall_timeout=scaled(2)),
                             **security(pki))
    got = []
    with loader.stream(num_epochs=2, first_epoch=0) as stream:
        it = iter(stream)
        # Until the remote daemons have delivered.
        while not all(served(stream)[r.tcp] for r in (r1, r2, r3)):
            got.append(next(it).copy())
        # r1 is killed while it holds a range: stopped first, it takes one
        # and cannot serve it; then it dies (its call fails at once).
        os.kill(r1.pid, signal.SIGSTOP)
        while not daemon_states(stream)[r1.tcp]["in_flight"]:
            got.append(next(it).copy())
        r1.proc.kill()
        r1.proc.wait()
        # r3 is drained (SIGTERM, as Kubernetes or systemd stop it) while it
        # holds a range.
        os.kill(r3.pid, signal.SIGSTOP)
        while not daemon_states(stream)[r3.tcp]["in_flight"]:
            got.append(next(it).copy())
        os.kill(r3.pid, signal.SIGTERM)
        os.kill(r3.pid, signal.SIGCONT)
        # r2 stops for good: the range the trainer waits for stalls.
        os.kill(r2.pid, signal.SIGSTOP)
        for b in it:
            got.append(b.copy())
        states = daemon_states(stream)
        requeued = stream.stats()["requeued"]
    same_batches(got, ref)
    assert "Connection refused" in states[r1.tcp]["last_error"] or "UNAVAILABLE" in \
        states[r1.tcp]["last_error"], states
    assert states[r2.tcp]["last_error"].startswith("stalled"), states
    assert r3.proc.wait(timeout=scaled(30)) == 0  # drained and gone
    assert states[r3.tcp]["last_error"], states
    assert requeued >= 2
    assert stream.starved_seconds > 0


TRAINER = textwrap.dedent("""
    import hashlib, json, sys, time
    import conveyor
    servers, ca, go_file = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3]
    loader = conveyor.Loader(servers=servers, pipeline="train", batch_size=%(batch)d,
                             seed=%(seed)d, tls_ca=ca, pool=conveyor.PoolOptions(
                                 policy="balanced", range_batches=2, ranges_ahead=1,
                                 streams_per_daemon=1,
                                 resolve_every=0.2))
    h = hashlib.sha256()
    joined_at = None
    with loader.stream(num_epochs=2, first_epoch=0) as stream:
        for i, b in enumerate(stream):
            for a in (b.indices, b.labels, b.images):
                h.update(a.tobytes())
            if i == 4:
                print("READ", flush=True)
                while not open(go_file).read():
                    time.sleep(0.02)
                joined_at = i
            time.sleep(0.03)
        print(json.dumps({"sha256": h.hexdigest(), "stats": stream.stats()}), flush=True)
""") % {"batch": BATCH, "seed": SEED}


def test_a_daemon_joining_by_dns_mid_epoch_gets_work(tmp_path, dataset, net, pki, daemons):
    """The trainer runs in a namespace of its own whose /etc/hosts answers
    pool.test with one remote daemon, then with two."""
    root, _ = dataset
    cfg = daemon_config(root)
    local = daemons(Daemon(tmp_path / "local", cfg, tcp=False))
    trainer = net.add("t")
    ips = []
    for name in ("r1", "r2"):
        ns = net.add(name)
        _, ip = net.link(trainer, ns)
        ips.append(ip)
        daemons(NsDaemon(tmp_path / name, tls_cfg(cfg, pki), net, ns, ip))
    net.hosts_file(trainer, "127.0.0.1 localhost\n%s %s\n" % (ips[0], NAME))
    ref = reference(local.unix)
    h = hashlib.sha256()
    for b in ref:
        for a in (b.indices, b.labels, b.images):
            h.update(a.tobytes())

    script = tmp_path / "trainer.py"
    script.write_text(TRAINER)
    go = tmp_path / "go"
    go.write_text("")
    proc = subprocess.Popen(
        net.prefix(trainer) + [PYTHON, str(script),
                               json.dumps([local.unix, "%s:%d" % (NAME, PORT)]),
                               str(pki["ca"]), str(go)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=client_env())
    try:
        assert proc.stdout.readline().strip() == "READ", proc.stderr.read()
        net.hosts_file(trainer, "127.0.0.1 localhost\n%s %s\n%s %s\n"
                       % (ips[0], NAME, ips[1], NAME))
        go.write_text("go")
        out, err = proc.communicate(timeout=scaled(120))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    result = json.loads(out.strip().splitlines()[-1])
    assert result["sha256"] == h.hexdigest(), "the pooled epoch differs from one daemon's"
    by_address = {d["address"]: d for d in result["stats"]["daemons"]}
    joined = by_address["%s:%d" % (ips[1], PORT)]
    assert joined["name"] == NAME and joined["ranges"] >= 1, by_address


def test_a_daemon_with_another_dataset_or_pipeline_is_refused_naming_the_part(tmp_path, dataset,
                                                                             net, pki, daemons):
    root, samples = dataset
    local = daemons(Daemon(tmp_path / "local", daemon_config(root), tcp=False))
    # The same images in another order: the same size, another dataset.
    listed = write_list_file(root.parent / "reversed.txt", list(reversed(samples)))
    other_data = daemon_config(root, pipelines={
        "train": pipeline_entry(root, dataset={"list": str(listed), "root": str(root)})})
    other_ops = daemon_config(root, pipelines={"train": pipeline_entry(root, augment="eval")})
    d_data = remote(tmp_path, net, pki, other_data, daemons, "data")
    d_ops = remote(tmp_path, net, pki, other_ops, daemons, "ops")
    ref = reference(local.unix, epochs=1)

    loader = conveyor.Loader(servers=[local.unix, d_data.tcp, d_ops.tcp], pipeline="train",
                             batch_size=BATCH, seed=SEED,
                             pool=conveyor.PoolOptions(policy="balanced", range_batches=1),
                             **security(pki))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with loader.stream(num_epochs=1, first_epoch=0) as stream:
            got = [b.copy() for b in stream]
            refused = dict(stream.refused)
    same_batches(got, ref)
    assert set(refused) == {d_data.tcp, d_ops.tcp}
    assert "differs from the first daemon's in dataset (digest: sha256:" in refused[d_data.tcp]
    assert "in transform (mode: 0 vs 1)" in refused[d_ops.tcp]
    said = " ".join(str(w.message) for w in caught)
    assert d_data.tcp in said and d_ops.tcp in said


def test_state_dict_moves_between_three_daemons_and_one(tmp_path, dataset, net, pki, daemons):
    root, _ = dataset
    cfg = daemon_config(root)
    local = daemons(Daemon(tmp_path / "local", cfg, tcp=False))
    others = remote_pair(tmp_path, net, pki, cfg, daemons)
    ref = reference(local.unix)
    options = conveyor.PoolOptions(policy="balanced", range_batches=2, ranges_ahead=1,
                                   streams_per_daemon=1)

    def pooled():
        return conveyor.Loader(servers=[local.unix] + [d.tcp for d in others], pipeline="train",
                               batch_size=BATCH, seed=SEED, pool=options, **security(pki))

    def single():
        return conveyor.Loader(local.unix, pipeline="train", batch_size=BATCH, seed=SEED)

    for first, second in ((pooled, single), (single, pooled)):
        a = first()
        got = []
        with a.stream(num_epochs=2, first_epoch=0) as stream:
            for b in stream:
                got.append(b.copy())
                if len(got) == 31:  # mid-way through epoch 1, mid-range
                    break
        state = a.state_dict()
        a.close()
        b_loader = second()
        b_loader.load_state_dict(state)
        with b_loader.stream(num_epochs=2 - state["epoch"]) as stream:
            got += [b.copy() for b in stream]
        b_loader.close()
        # The resumed part counts batch_in_epoch / position from the resume
        # point on one daemon, from the epoch's start in the pool: compare
        # what a trainer uses.
        assert [(b.epoch, b.offset) for b in got] == [(b.epoch, b.offset) for b in ref]
        gi, gl, gx = collect(got)
        ri, rl, rx = collect(ref)
        assert gi.tolist() == ri.tolist() and gl.tolist() == rl.tolist()
        assert gx.tobytes() == rx.tobytes()


def test_max_batches_serves_a_range_and_pipelines_carry_a_fingerprint(daemon):
    ref = reference(daemon.unix, epochs=1)
    with conveyor.open_stream(daemon.unix, "train", BATCH, seed=SEED, resume=(0, 3 * BATCH, 1),
                              max_batches=4) as stream:
        got = [b.copy() for b in stream]
        end = stream.end
    assert len(got) == 4 and end.batches == 4
    gi, _, gx = collect(got)
    ri, _, rx = collect(ref[3:7])
    assert gi.tolist() == ri.tolist() and gx.tobytes() == rx.tobytes()
    info = {p.name: p for p in conveyor.list_pipelines(daemon.unix)}["train"]
    assert sorted(info.fingerprint) == ["dataset", "decoders", "fields", "order", "samples",
                                        "transform"]
    assert info.fingerprint["dataset"].startswith("digest=sha256:")
    assert "samples=%d" % info.dataset_size in info.fingerprint["dataset"]


def test_cli_fetch_spreads_over_also_server_and_writes_what_one_daemon_gives(tmp_path, dataset,
                                                                             daemons):
    root, _ = dataset
    cfg = daemon_config(root)
    local = daemons(Daemon(tmp_path / "local", cfg, tcp=False))
    other = daemons(Daemon(tmp_path / "other", cfg))
    outputs = {}
    for name, extra in (("one", []), ("two", ["--also-server", other.tcp])):
        out = tmp_path / name
        r = subprocess.run([PYTHON, "-m", "conveyor", "fetch", "--server", local.unix,
                            "--pipeline", "train", "--epochs", "1", "--batch-size", "4",
                            "--seed", str(SEED), "--out", str(out), "--json"] + extra,
                           capture_output=True, text=True, env=client_env(), timeout=scaled(120))
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["batches"] == 12
        outputs[name] = {p.name: p.read_bytes() for p in sorted(out.iterdir())}
    assert outputs["one"] == outputs["two"]


FETCH_BATCHES = BUILD_DIR / "client" / "cpp" / "fetch_batches"


def cpp_fetch(args, out, stdin_lines=None, on_paused=None):
    """Runs fetch_batches (the C++ client's PoolStream with --also-server);
    returns ([(labels, indices)] per batch, its pool lines, the image bytes)."""
    proc = subprocess.Popen([str(FETCH_BATCHES), "--out", str(out)] + args, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if line.startswith("paused") and on_paused is not None:
            on_paused()
            proc.stdin.write("\n")
            proc.stdin.flush()
    err = proc.stderr.read()
    assert proc.wait(timeout=scaled(120)) == 0, err
    batches, pool = [], {}
    for line in lines:
        fields = dict(w.split("=", 1) for w in line.split()[1:] if "=" in w)
        if line.startswith("batch "):
            batches.append((fields["labels"], fields["indices"]))
        elif line.startswith("pool "):
            pool[fields["address"]] = fields
    return batches, pool, out.read_bytes()


@pytest.mark.parametrize("kill", [False, True])
def test_cpp_client_pool_is_byte_identical_and_survives_a_killed_and_a_stopped_daemon(
        tmp_path, dataset, daemons, kill):
    root, _ = dataset
    cfg = daemon_config(root)
    local = daemons(Daemon(tmp_path / "local", cfg, tcp=False))
    a = daemons(Daemon(tmp_path / "a", cfg))
    b = daemons(Daemon(tmp_path / "b", cfg))
    ref = reference(local.unix)
    args = ["--server", local.unix, "--also-server", a.tcp, "--also-server", b.tcp,
            "--pipeline", "train", "--batch-size", str(BATCH), "--seed", str(SEED),
            "--epochs", "2", "--balanced", "--range-batches", "2", "--stall-seconds",
            str(scaled(2))]

    def stop_two():
        a.proc.kill()
        a.proc.wait()
        os.kill(b.pid, signal.SIGSTOP)

    if kill:
        args += ["--pause-after", "6"]
    batches, pool, images = cpp_fetch(args, tmp_path / "images.bin",
                                      on_paused=stop_two if kill else None)
    assert batches == [(",".join(str(x) for x in r.labels), ",".join(str(x) for x in r.indices))
                       for r in ref]
    _, _, rx = collect(ref)
    assert images == rx.tobytes()
    assert set(pool) == {local.unix, a.tcp, b.tcp}
    assert sum(int(d["batches"]) for d in pool.values()) == len(ref)
    if kill:
        assert pool[a.tcp]["error"] == "yes" and pool[b.tcp]["error"] == "yes", pool
    else:
        assert all(int(d["ranges"]) >= 1 for d in pool.values()), pool


def test_a_pooled_loader_pickles_and_feeds_torch(tmp_path, dataset, daemons):
    """What a spawned DataLoader worker and conveyor.torch do with a Loader:
    pickle it, and read it through TorchLoader."""
    import pickle

    import torch  # noqa: F401  (Debian's python3-torch)
    from conveyor.torch import TorchLoader
    root, _ = dataset
    cfg = daemon_config(root)
    local = daemons(Daemon(tmp_path / "local", cfg, tcp=False))
    other = daemons(Daemon(tmp_path / "other", cfg))
    ref = reference(local.unix, epochs=1)
    loader = pickle.loads(pickle.dumps(conveyor.Loader(
        servers=[local.unix, other.tcp], pipeline="train", batch_size=BATCH, seed=SEED,
        pool=conveyor.PoolOptions(policy="balanced", range_batches=2))))
    got = [(images.numpy().copy(), labels.numpy().copy())
           for images, labels in TorchLoader.from_loader(loader)]
    assert [g[1].tolist() for g in got] == [r.labels.tolist() for r in ref]
    assert b"".join(g[0].tobytes() for g in got) == collect(ref)[2].tobytes()


def test_pool_arguments_are_checked(daemon):
    with pytest.raises(conveyor.InvalidRequest, match="servers= takes a list"):
        conveyor.Loader(servers=daemon.unix, pipeline="train", batch_size=BATCH)
    with pytest.raises(conveyor.InvalidRequest, match="pool policy"):
        conveyor.Loader(servers=[daemon.unix], pipeline="train", batch_size=BATCH,
                        pool=conveyor.PoolOptions(policy="fastest"))
    with pytest.raises(conveyor.InvalidRequest, match="retry= is for one daemon"):
        conveyor.Loader(servers=[daemon.unix], pipeline="train", batch_size=BATCH,
                        retry=conveyor.RetryPolicy())
    with pytest.raises(conveyor.InvalidRequest, match="port must be"):
        conveyor.Loader(servers=[daemon.unix, "pool.test:http"], pipeline="train",
                        batch_size=BATCH)
    with pytest.raises(conveyor.Unavailable, match="no daemon of servers="):
        loader = conveyor.Loader(servers=["unix:///nonexistent/conveyor.sock"], pipeline="train",
                                 batch_size=BATCH)
        loader.stream(num_epochs=1)
    assert sys.modules["conveyor._pool"].POLICIES == ("local_first", "balanced")
