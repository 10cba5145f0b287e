"""s3:// datasets read by a real conveyord from a real S3-compatible server
on loopback (moto's server mode with IAM authentication, from the cached
moto virtual environment; bucket and objects uploaded with boto3): requests
are signed with AWS Signature V4 from credentials in the environment or the
shared credentials file; a wrong secret is a clear error naming the bucket
and the host, and the secret appears in no message and no log line."""

import json
import os
import subprocess
from pathlib import Path

import pytest

import conveyor
from conveyor_integration import (IMAGE_SIZE, daemon_config, make_image_folder, pipeline_entry,
                                  read_epoch, scaled, venv_python)
from remote_fixtures import image_files, write_url_list

BUCKET = "train-data"


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    root = tmp_path_factory.mktemp("images")
    make_image_folder(root, classes=2, per_class=12)
    files = image_files(root)
    python = venv_python("moto")
    proc = subprocess.Popen([python, str(Path(__file__).parent / "moto_s3_server.py")],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True,
                            env={k: v for k, v in os.environ.items() if not k.startswith("AWS_")})
    try:
        proc.stdin.write(json.dumps({"bucket": BUCKET, "objects": {
            "imgs/" + f: str(root / f) for f in files}}) + "\n")
        proc.stdin.flush()
        line = proc.stdout.readline()
        assert line, "moto server did not start (exit %s)" % proc.poll()
        info = json.loads(line)
        info.update(root=root, files=files, endpoint="http://127.0.0.1:%d" % info["port"])
        yield info
    finally:
        proc.stdin.close()
        try:
            proc.wait(timeout=scaled(20))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def s3_config(tmp_path, s3, policy="fail_fast", urls=None, **s3_section):
    urls = urls or ["s3://%s/imgs/%s" % (BUCKET, f) for f in s3["files"]]
    write_url_list(tmp_path / "urls.tsv", urls)
    entry = pipeline_entry("unused", augment="eval", resize_size=IMAGE_SIZE, error_policy=policy)
    entry["dataset"] = {"urls": str(tmp_path / "urls.tsv")}
    local = write_url_list(tmp_path / "local.tsv", s3["files"])
    disk = pipeline_entry("unused", augment="eval", resize_size=IMAGE_SIZE)
    disk["dataset"] = {"list": str(local), "root": str(s3["root"])}
    cfg = daemon_config(tmp_path, pipelines={"s3": entry, "disk": disk})
    cfg["allowed_roots"] = [str(tmp_path), str(s3["root"])]
    cfg["remote"] = {"initial_backoff_ms": 5, "max_backoff_ms": 50,
                     "s3": dict({"endpoint": s3["endpoint"], "region": "us-east-1"}, **s3_section)}
    cfg["engine"] = {"fetch_retry_max_attempts": 2, "fetch_retry_initial_backoff_ms": 10,
                     "fetch_retry_max_backoff_ms": 20}
    return cfg


@pytest.fixture
def start(daemon_factory, monkeypatch):
    """start(cfg, **AWS_VARS): a daemon whose environment holds exactly these
    AWS_* variables (the test's own are removed)."""

    def run(cfg, **aws):
        for k in [k for k in os.environ if k.startswith("AWS_")]:
            monkeypatch.delenv(k)
        for k, v in aws.items():
            monkeypatch.setenv(k, v)
        return daemon_factory(cfg)

    return run


def test_signed_reads_from_environment_credentials(s3, tmp_path, start):
    d = start(s3_config(tmp_path, s3), AWS_ACCESS_KEY_ID=s3["key_id"],
              AWS_SECRET_ACCESS_KEY=s3["secret"])
    got = read_epoch(d.unix, pipeline="s3", batch_size=8, seed=2, epoch=0)
    n = len(s3["files"])
    assert sorted(got.indices.tolist()) == list(range(n))
    assert got.labels.tolist() == got.indices.tolist()
    ref = read_epoch(d.unix, pipeline="disk", batch_size=8, seed=2, epoch=0)
    assert got.images.tobytes() == ref.images.tobytes(), "bytes differ from the disk's"
    assert s3["secret"] not in d.log()


def test_credentials_file_profile(s3, tmp_path, start):
    creds = tmp_path / "credentials"
    creds.write_text("[default]\naws_access_key_id = nobody\naws_secret_access_key = x\n"
                     "[train]\naws_access_key_id = %s\naws_secret_access_key = %s\n"
                     % (s3["key_id"], s3["secret"]))
    d = start(s3_config(tmp_path, s3, profile="train"), AWS_SHARED_CREDENTIALS_FILE=str(creds))
    got = read_epoch(d.unix, pipeline="s3", batch_size=8, seed=4, epoch=1)
    assert sorted(got.indices.tolist()) == list(range(len(s3["files"])))


def test_wrong_secret_is_a_clear_error_without_the_secret(s3, tmp_path, start):
    wrong = "Wr0ngSecretValue/abcdefghijklmnopqrstuv"
    d = start(s3_config(tmp_path, s3), AWS_ACCESS_KEY_ID=s3["key_id"], AWS_SECRET_ACCESS_KEY=wrong)
    with pytest.raises(conveyor.ConveyorError) as e:
        read_epoch(d.unix, pipeline="s3", batch_size=8, seed=2, epoch=0)
    msg = str(e.value)
    assert "403" in msg and BUCKET in msg and "127.0.0.1:%d" % s3["port"] in msg, msg
    assert wrong not in msg and s3["secret"] not in msg
    stats = json.dumps(str(conveyor.stats(d.unix)))
    assert wrong not in stats
    assert wrong not in d.log() and s3["secret"] not in d.log()


def test_missing_key_is_an_error_of_its_sample(s3, tmp_path, start):
    urls = ["s3://%s/imgs/%s" % (BUCKET, f) for f in s3["files"]]
    urls[3] = "s3://%s/imgs/missing.jpg" % BUCKET
    cfg = s3_config(tmp_path, s3, policy="skip", urls=urls)
    cfg["pipelines"]["s3"]["failure_rate_min_samples"] = 1000
    d = start(cfg, AWS_ACCESS_KEY_ID=s3["key_id"], AWS_SECRET_ACCESS_KEY=s3["secret"])
    got = read_epoch(d.unix, pipeline="s3", batch_size=8, seed=2, epoch=0)
    assert sorted(got.indices.tolist()) == [i for i in range(len(urls)) if i != 3]


def test_cached_epoch_two_reads_nothing_from_s3(s3, tmp_path, start):
    """The node-local cache (config `cache`) over s3:// objects: epoch 2 is
    all hits (moto's ETags revalidate each object), no byte from the
    network, the same bytes as from disk."""
    cfg = s3_config(tmp_path, s3)
    cfg["cache"] = {"dir": str(tmp_path / "cache"), "max_bytes": "64MiB"}
    d = start(cfg, AWS_ACCESS_KEY_ID=s3["key_id"], AWS_SECRET_ACCESS_KEY=s3["secret"])
    n = len(s3["files"])
    read_epoch(d.unix, pipeline="s3", batch_size=8, seed=2, epoch=0)
    first = conveyor.stats(d.unix).object_cache
    assert (first.misses, first.entries) == (n, n)
    got = read_epoch(d.unix, pipeline="s3", batch_size=8, seed=2, epoch=1)
    c = conveyor.stats(d.unix).object_cache
    assert c.hits - first.hits == n and c.misses == first.misses
    assert c.bytes_from_network == first.bytes_from_network, "epoch 2 fetched no body"
    ref = read_epoch(d.unix, pipeline="disk", batch_size=8, seed=2, epoch=1)
    assert got.images.tobytes() == ref.images.tobytes(), "cached bytes differ from the disk's"
    assert s3["secret"] not in d.log()
