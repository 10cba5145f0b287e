"""Wrong requests get the documented gRPC status (as client exceptions) with a
message naming what to fix; broken configs stop conveyord at start with exit
code 2 and the bad field named on stderr."""

import re
import subprocess

import grpc
import pytest

import conveyor
from conveyor_integration import (CONVEYORD, MAX_BATCH, daemon_config, pipeline_entry, require_daemon,
                      write_config)


def _open(address, **kw):
    args = dict(pipeline="train", batch_size=8, credits=2, num_epochs=1)
    args.update(kw)
    stream = conveyor.open_stream(address, args.pop("pipeline"), args.pop("batch_size"), **args)
    try:
        next(stream)  # errors found after StreamOpened surface here
    finally:
        stream.close()


def _expect(exc_type, code, pattern, **kw):
    def check(address):
        with pytest.raises(exc_type) as info:
            _open(address, **kw)
        assert info.value.code == code, info.value
        assert re.search(pattern, str(info.value), re.I), info.value
    return check


def test_unknown_pipeline_is_not_found(daemon):
    _expect(conveyor.NotFound, grpc.StatusCode.NOT_FOUND, "no-such-pipeline",
            pipeline="no-such-pipeline")(daemon.unix)


@pytest.mark.parametrize("batch_size", [0, MAX_BATCH + 1, 1 << 30])
def test_bad_batch_size_is_invalid_argument(daemon, batch_size):
    _expect(conveyor.InvalidRequest, grpc.StatusCode.INVALID_ARGUMENT, r"batch.?size",
            batch_size=batch_size)(daemon.unix)


@pytest.mark.parametrize("credits", [0, 65, 1 << 20])
def test_bad_credits_is_invalid_argument(daemon, credits):
    _expect(conveyor.InvalidRequest, grpc.StatusCode.INVALID_ARGUMENT, "credits",
            credits=credits)(daemon.unix)


def test_rank_not_below_world_size_is_invalid_argument(daemon):
    _expect(conveyor.InvalidRequest, grpc.StatusCode.INVALID_ARGUMENT, "rank",
            rank=2, world_size=2)(daemon.unix)


def test_shared_memory_over_tcp_is_failed_precondition(daemon):
    _expect(conveyor.InvalidRequest, grpc.StatusCode.FAILED_PRECONDITION, r"shared|memory|unix",
            transport="shared_memory")(daemon.tcp)


def test_resume_past_end_of_epoch_is_out_of_range(daemon, dataset):
    _, samples = dataset
    _expect(conveyor.InvalidRequest, grpc.StatusCode.OUT_OF_RANGE, r"offset|resume",
            resume=(0, len(samples) + 1, 1))(daemon.unix)


def test_inline_over_unix_socket_is_allowed(daemon, dataset):
    """The counterpart of the FAILED_PRECONDITION case: inline works anywhere."""
    _, samples = dataset
    loader = conveyor.Loader(daemon.unix, pipeline="train", batch_size=16, transport="inline")
    with loader.epoch(0) as stream:
        assert stream.transport == "inline"
        assert sum(b.num_samples for b in stream) == len(samples)
    loader.close()


# --- configs refused at start ------------------------------------------------
def _bad_configs(root, tmp):
    outside = tmp / "outside"
    outside.mkdir()
    cfgs = {}
    p = pipeline_entry(root)
    p["colour"] = "red"
    cfgs["unknown_field"] = (daemon_config(root, pipelines={"train": p}), "colour")
    cfgs["bad_dtype"] = (daemon_config(root, pipelines={"train": pipeline_entry(root, dtype="int7")}),
                         "dtype")
    cfgs["root_outside_allowed_roots"] = (
        daemon_config(root, allowed_roots=[str(outside)]), r"root|allowed_roots")
    cfgs["missing_dataset_dir"] = (
        daemon_config(root, pipelines={"train": pipeline_entry(root.parent / "does-not-exist")}),
        r"dataset|root")
    return cfgs


@pytest.mark.parametrize("case", ["unknown_field", "bad_dtype", "root_outside_allowed_roots",
                                  "missing_dataset_dir"])
def test_bad_config_is_refused_with_the_field_named(dataset, tmp_path, case):
    require_daemon()
    root, _ = dataset
    cfg, field = _bad_configs(root, tmp_path)[case]
    path = write_config(tmp_path / "bad.yaml", cfg)
    sock = tmp_path / "s.sock"
    try:
        res = subprocess.run([str(CONVEYORD), "--config", str(path), "--socket", str(sock)],
                             capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired:
        pytest.fail("conveyord started with a broken config (%s) instead of refusing it" % case)
    assert res.returncode == 2, (res.returncode, res.stderr)
    assert re.search(field, res.stderr), "stderr does not name %r:\n%s" % (field, res.stderr)
    assert not sock.exists()
