"""relay_jpeg against a real conveyord with a cache folder: the first epoch
is served from the original files while re-laid copies are made in the
background; the next epoch is served from the copies, byte-identical to the
first and to a pipeline without relay_jpeg; the copies are in the cache
folder, counted in GetStats, `conveyor stats` and the metrics;
`conveyord --prepare` makes every copy before the daemon serves, so even
its first epoch reads copies; a
relay_jpeg pipeline without a cache, or of URL samples, is refused naming
the field."""

import subprocess
import urllib.request

import conveyor
from conveyor_integration import (CLI, CONVEYORD, PYTHON, client_env, daemon_config,
                                  make_image_folder, pipeline_entry, read_epoch, scaled,
                                  wait_until, write_config)


def test_second_epoch_is_served_from_relaid_copies_byte_identical(tmp_path, daemon_factory):
    root, _ = make_image_folder(tmp_path / "images", classes=2, per_class=10, min_side=120,
                                max_side=260)
    n = 20
    cfg = daemon_config(root, pipelines={"relaid": pipeline_entry(root, relay_jpeg=True),
                                         "plain": pipeline_entry(root)},
                        metrics={"listen": "127.0.0.1:0"})
    cfg["cache"] = {"dir": str(tmp_path / "cache"), "max_bytes": "64MiB"}
    d = daemon_factory(cfg)
    first = read_epoch(d.unix, pipeline="relaid", seed=5, epoch=1)
    assert sorted(first.indices.tolist()) == list(range(n))
    # Every file read once was queued; the copies come on a background thread.
    assert wait_until(lambda: conveyor.stats(d.unix).object_cache.relaid_made == n,
                      scaled(60), interval=0.1), conveyor.stats(d.unix).object_cache
    hits_before = conveyor.stats(d.unix).object_cache.hits
    second = read_epoch(d.unix, pipeline="relaid", seed=5, epoch=1)
    c = conveyor.stats(d.unix).object_cache
    assert c.hits - hits_before == n, "every sample read from its copy"
    assert c.relaid_refused == 0 and c.entries == n
    assert second.images.tobytes() == first.images.tobytes(), "a copy decoded differently"
    plain = read_epoch(d.unix, pipeline="plain", seed=5, epoch=1)
    assert plain.images.tobytes() == second.images.tobytes()
    # The copies are files of the cache folder, and the counters are shown.
    assert len(list((tmp_path / "cache").glob("*.obj"))) == n
    text = subprocess.run([PYTHON, str(CLI), "stats", "--server", d.unix], capture_output=True,
                          text=True, timeout=scaled(60), env=client_env())
    assert text.returncode == 0, text.stderr
    assert "relay_jpeg: %d re-laid, 0 refused" % n in text.stdout
    port = int(d.log().split("Prometheus metrics on http://127.0.0.1:")[1].split("/")[0])
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10) as r:
        metrics = r.read().decode()
    assert 'conveyor_cache_relaid_jpegs_total{outcome="made"} %d' % n in metrics


def test_prepare_makes_every_copy_before_the_daemon_serves(tmp_path, daemon_factory):
    root, _ = make_image_folder(tmp_path / "images", classes=2, per_class=8, min_side=120,
                                max_side=260)
    n = 16
    (root / "class_a" / "notes.jpg").write_bytes(b"not a JPEG at all")
    cfg = daemon_config(root, pipelines={"relaid": pipeline_entry(root, relay_jpeg=True,
                                                                  error_policy="skip"),
                                         "plain": pipeline_entry(root, error_policy="skip")})
    cfg["cache"] = {"dir": str(tmp_path / "cache"), "max_bytes": "64MiB"}
    path = write_config(tmp_path / "conveyord.yaml", cfg)

    def prepare(name):
        return subprocess.run([str(CONVEYORD), "--config", str(path), "--prepare", name],
                              capture_output=True, text=True, timeout=scaled(120))

    r = prepare("relaid")
    assert r.returncode == 0, r.stderr
    assert ("prepared pipeline relaid: %d of %d samples: %d copies made, 0 already there, "
            "1 not re-laid" % (n + 1, n + 1, n)) in r.stdout, r.stdout
    assert len(list((tmp_path / "cache").glob("*.obj"))) == n
    # Again: nothing left to do.
    r = prepare("relaid")
    assert r.returncode == 0 and "0 copies made, %d already there" % n in r.stdout, r.stdout
    # Errors name what is wrong.
    r = prepare("plain")
    assert r.returncode == 2 and "pipeline 'plain' has no relay_jpeg: true" in r.stderr, r.stderr
    r = prepare("nope")
    assert r.returncode == 2 and "has no pipeline 'nope' (it has: relaid, plain)" in r.stderr

    # The daemon's very first epoch reads copies only, and makes none.
    d = daemon_factory(cfg)
    first = read_epoch(d.unix, pipeline="relaid", seed=5, epoch=1)
    c = conveyor.stats(d.unix).object_cache
    assert c.hits == n and c.relaid_made == 0, c
    plain = read_epoch(d.unix, pipeline="plain", seed=5, epoch=1)
    assert plain.images.tobytes() == first.images.tobytes()
    # The running daemon holds the folder: --prepare says so.
    r = prepare("relaid")
    assert r.returncode == 2 and "is held by another process" in r.stderr, r.stderr


def test_relay_jpeg_needs_a_cache_and_local_images(tmp_path):
    root, _ = make_image_folder(tmp_path / "images", classes=1, per_class=2)
    urls = tmp_path / "urls.tsv"
    urls.write_text("http://127.0.0.1:9/a.jpg\t0\n")
    web = pipeline_entry(root, relay_jpeg=True)
    web["dataset"] = {"urls": str(urls)}
    cases = [
        (daemon_config(root, pipelines={"p": pipeline_entry(root, relay_jpeg=True)}),
         "pipelines.p.relay_jpeg: needs the daemon's `cache`"),
        (dict(daemon_config(tmp_path, pipelines={"p": web}),
              cache={"dir": str(tmp_path / "c"), "max_bytes": "8MiB"}),
         "pipelines.p.relay_jpeg: is for image pipelines of local files or tar shards"),
    ]
    for cfg, expected in cases:
        cfg["allowed_roots"] = [str(tmp_path)]
        path = write_config(tmp_path / "conveyord.yaml", cfg)
        r = subprocess.run([str(CONVEYORD), "--config", str(path), "--check-config"],
                           capture_output=True, text=True, timeout=scaled(60))
        assert r.returncode != 0, r.stdout
        assert expected in r.stderr, r.stderr
