"""Access control on TCP (the `access` and `listen.tls` config sections),
with real daemons and credentials the tests make with the openssl CLI:

- bearer tokens: a TCP call without a token, or with a wrong one, is
  UNAUTHENTICATED on every RPC; a token limited to some pipelines sees only
  those in ListPipelines and gets PERMISSION_DENIED for the others; the
  unix socket needs no token unless access.require_token_on_unix; no token
  ever reaches the daemon's log; a token file others may read is refused at
  start;
- a TCP listener off loopback with neither TLS nor tokens is refused at
  start unless listen.allow_insecure_tcp (then it warns).
"""

import os
import subprocess

import grpc
import numpy as np
import pytest

import conveyor
from conveyor.daemon import DaemonError
from conveyor_integration import (CLI, PYTHON, Daemon, client_env, daemon_config, pb, pb_grpc,
                                  read_epoch, require_daemon, scaled)


def openssl(*args, cwd=None):
    return subprocess.run(["openssl"] + [str(a) for a in args], check=True, capture_output=True,
                          cwd=cwd, timeout=scaled(60)).stdout


def make_token_file(path, mode=0o600):
    token = openssl("rand", "-hex", "32").decode().strip()
    path.write_text(token + "\n")
    os.chmod(path, mode)
    return token


@pytest.fixture(scope="module")
def tokens(tmp_path_factory):
    """{name: (path, token)} for `trainer` (pipeline train only), `ops`
    (every pipeline, operator) and `stranger` (a token the daemon does not
    know)."""
    folder = tmp_path_factory.mktemp("tokens")
    return {name: (folder / name, make_token_file(folder / name))
            for name in ("trainer", "ops", "stranger")}


def yaml_of_token_config(root, tokens, require_token_on_unix=False):
    # conftest's YAML writer does not nest maps in lists: written by hand.
    from conveyor_integration import _yaml
    cfg = daemon_config(root)
    text = _yaml(cfg) + "\n"
    text += "access:\n  require_token_on_unix: %s\n  tokens:\n" % (
        "true" if require_token_on_unix else "false")
    text += "    - {name: trainer, file: '%s', pipelines: [train]}\n" % tokens["trainer"][0]
    text += "    - {name: ops, file: '%s', operator: true}\n" % tokens["ops"][0]
    return text


@pytest.fixture(scope="module")
def token_daemon(tmp_path_factory, dataset, tokens):
    root, _ = dataset
    d = Daemon(tmp_path_factory.mktemp("tokd"), yaml_of_token_config(root, tokens))
    try:
        d.start()
        yield d
    finally:
        d.stop(timeout=scaled(10))


def metadata_for(token):
    return None if token is None else [("authorization", "Bearer " + token)]


def call_every_rpc(address, token):
    """The status code of ListPipelines, GetStats and StreamBatches (opening
    pipeline train) on `address` with `token` (None: no metadata)."""
    channel = grpc.insecure_channel(address)
    stub = pb_grpc.ConveyorStub(channel)
    md = metadata_for(token)
    codes = {}
    try:
        for name, call in [("ListPipelines", lambda: stub.ListPipelines(
                                pb.ListPipelinesRequest(), timeout=scaled(10), metadata=md)),
                           ("GetStats", lambda: stub.GetStats(
                               pb.GetStatsRequest(), timeout=scaled(10), metadata=md))]:
            try:
                call()
                codes[name] = grpc.StatusCode.OK
            except grpc.RpcError as e:
                codes[name] = e.code()
                assert token is None or token not in (e.details() or "")
        req = pb.OpenStream(pipeline="train", batch_size=8, credits=2, num_epochs=1,
                            transport=pb.INLINE)
        call = stub.StreamBatches(iter([pb.ClientMessage(open=req)]), timeout=scaled(10),
                                  metadata=md)
        try:
            first = next(call)
            codes["StreamBatches"] = grpc.StatusCode.OK
            assert first.WhichOneof("kind") == "opened"
        except grpc.RpcError as e:
            codes["StreamBatches"] = e.code()
        finally:
            call.cancel()
    finally:
        channel.close()
    return codes


def test_tcp_without_a_token_is_unauthenticated_on_every_rpc(token_daemon):
    codes = call_every_rpc(token_daemon.tcp, None)
    assert codes == {k: grpc.StatusCode.UNAUTHENTICATED
                     for k in ("ListPipelines", "GetStats", "StreamBatches")}, codes
    # The unix socket needs none (access.require_token_on_unix is off).
    assert set(call_every_rpc(token_daemon.unix, None).values()) == {grpc.StatusCode.OK}


def test_a_wrong_token_is_unauthenticated_everywhere(token_daemon, tokens):
    stranger = tokens["stranger"][1]
    for address in (token_daemon.tcp, token_daemon.unix):
        codes = call_every_rpc(address, stranger)
        assert set(codes.values()) == {grpc.StatusCode.UNAUTHENTICATED}, (address, codes)
    # Not a bearer token at all.
    channel = grpc.insecure_channel(token_daemon.tcp)
    try:
        with pytest.raises(grpc.RpcError) as e:
            pb_grpc.ConveyorStub(channel).ListPipelines(
                pb.ListPipelinesRequest(), timeout=scaled(10),
                metadata=[("authorization", "Basic " + tokens["ops"][1])])
        assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED
    finally:
        channel.close()


def test_a_token_opens_only_its_pipelines_and_lists_only_them(token_daemon, tokens, dataset):
    _, samples = dataset
    trainer_file, trainer = tokens["trainer"]
    assert set(call_every_rpc(token_daemon.tcp, trainer).values()) == {grpc.StatusCode.OK}
    names = [p.name for p in conveyor.list_pipelines(
        token_daemon.tcp, security=conveyor.Security(token_file=str(trainer_file)))]
    assert names == ["train"]
    names = [p.name for p in conveyor.list_pipelines(
        token_daemon.tcp, security=conveyor.Security(token=tokens["ops"][1]))]
    assert sorted(names) == ["eval", "train"]

    loader = conveyor.Loader(token_daemon.tcp, pipeline="eval", batch_size=8,
                             token_file=str(trainer_file))
    with pytest.raises(conveyor.AccessDenied) as e:
        loader.epoch(0)
    loader.close()
    assert e.value.code == grpc.StatusCode.PERMISSION_DENIED
    assert trainer not in str(e.value)

    # The token's pipeline streams over both TCP transports, the same batches
    # as the unix socket's.
    reference = read_epoch(token_daemon.unix, seed=3)
    for transport in ("data_socket", "inline"):
        got = read_epoch(token_daemon.tcp, seed=3, transport=transport,
                         token_file=str(trainer_file))
        assert got.transport == transport
        assert len(got.indices) == len(samples)
        np.testing.assert_array_equal(got.images, reference.images)
        np.testing.assert_array_equal(got.indices, reference.indices)


def test_the_cli_sends_the_token_from_its_flag_or_the_environment(token_daemon, tokens):
    trainer_file, _ = tokens["trainer"]
    env = client_env()
    env.pop("CONVEYOR_TOKEN_FILE", None)
    run = lambda *args, env=env: subprocess.run(  # noqa: E731
        [PYTHON, str(CLI)] + list(args), capture_output=True, text=True, env=env,
        timeout=scaled(60))
    r = run("pipelines", "--server", token_daemon.tcp)
    assert r.returncode == 6, r.stderr
    assert "UNAUTHENTICATED" in r.stderr
    r = run("pipelines", "--server", token_daemon.tcp, "--token-file", str(trainer_file))
    assert r.returncode == 0, r.stderr
    assert "train" in r.stdout and "eval" not in r.stdout
    r = run("pipelines", "--server", token_daemon.tcp,
            env=dict(env, CONVEYOR_TOKEN_FILE=str(tokens["ops"][0])))
    assert r.returncode == 0, r.stderr
    assert "eval" in r.stdout


def test_the_client_keeps_its_token_out_of_reprs_and_errors(tmp_path, tokens):
    path, token = tokens["trainer"]
    assert token not in repr(conveyor.Security(token_file=str(path)))
    env = {"CONVEYOR_TOKEN_FILE": str(path), "CONVEYOR_TLS_CA": "/nonexistent/ca.pem"}
    sec = conveyor.Security.from_env(env)
    assert sec.has_token and sec.tls_ca == "/nonexistent/ca.pem"
    with pytest.raises(conveyor.InvalidRequest, match="cannot read the token file"):
        conveyor.Security(token_file=str(tmp_path / "missing"))
    with pytest.raises(conveyor.InvalidRequest) as e:
        conveyor.Security(token=token + " x")
    assert token not in str(e.value)


def test_the_log_never_holds_a_token(token_daemon, tokens):
    # Every test above ran against this daemon; make sure it logged calls.
    call_every_rpc(token_daemon.tcp, tokens["stranger"][1])
    log = token_daemon.log()
    assert "bearer token" in log  # the start line says tokens are required
    assert "(as 'trainer')" in log  # streams are logged with the token's name
    for _, token in tokens.values():
        assert token not in log
        assert token[:16] not in log


def test_the_unix_socket_can_require_tokens(daemon_factory, dataset, tokens):
    root, _ = dataset
    d = daemon_factory(yaml_of_token_config(root, tokens, require_token_on_unix=True))
    codes = call_every_rpc(d.unix, None)
    assert set(codes.values()) == {grpc.StatusCode.UNAUTHENTICATED}, codes
    assert set(call_every_rpc(d.unix, tokens["ops"][1]).values()) == {grpc.StatusCode.OK}
    # Shared memory still works for a unix client with a token.
    got = read_epoch(d.unix, token=tokens["trainer"][1])
    assert got.transport == "shared_memory"


@pytest.mark.parametrize("mode,why", [(0o644, "may be read or written by others"),
                                      (0o600, "is empty")])
def test_a_bad_token_file_is_refused_at_start(tmp_path, dataset, tokens, mode, why):
    require_daemon()
    root, _ = dataset
    bad = tmp_path / "bad-token"
    if why == "is empty":
        bad.write_text("\n")
        os.chmod(bad, mode)
    else:
        secret = make_token_file(bad, mode)
    text = yaml_of_token_config(root, tokens).replace(str(tokens["ops"][0]), str(bad))
    d = Daemon(tmp_path / "d", text)
    with pytest.raises(DaemonError):
        d.start()
    d.stop()
    assert d.proc.returncode == 2  # a config error, found before anything listens
    log = d.log()
    assert "conveyord.yaml: field access.tokens[1].file" in log and why in log, log
    if why != "is empty":
        assert secret not in log


def test_insecure_tcp_off_loopback_is_refused_unless_allowed(tmp_path, dataset):
    require_daemon()
    root, _ = dataset
    d = Daemon(tmp_path / "refused", daemon_config(root), extra_args=["--tcp", "0.0.0.0:0"])
    with pytest.raises(DaemonError):
        d.start()
    d.stop()
    assert d.proc.returncode == 2
    assert "not a loopback address" in d.log() and "listen.allow_insecure_tcp" in d.log()

    cfg = daemon_config(root, listen={"allow_insecure_tcp": True})
    d = Daemon(tmp_path / "allowed", cfg, extra_args=["--tcp", "0.0.0.0:0"])
    d.start()
    try:
        assert set(call_every_rpc(d.tcp, None).values()) == {grpc.StatusCode.OK}
        assert "is not a loopback address and has neither TLS nor bearer tokens" in d.log()
    finally:
        d.stop(timeout=scaled(10))
