"""Sample fields read from the columns of a URL list (`dataset.urls` lines
`URL<TAB>label<TAB>column 2<TAB>column 3...`), end to end: a real conveyord
fetches every image over HTTP from the test object server on 127.0.0.1
(http_object_server.py) and delivers the columns of its line beside it.

Pins:
- Over one full epoch every sample arrives exactly once, beside its own
  image and label, with its own caption (column 2, `text`), its own JSON
  (column 3, `json`, parsed equal to what the line holds) and its key. The
  key of a URL sample is its URL as the daemon names the sample (config
  README, "Sample fields" and `dataset.urls`; core/data/sample_fields.h,
  server/config/loader.cc DisplayIndex): the URL itself, and for a URL with
  a query string the URL without it (the query may be a presigned secret).
  `#` comments and blank lines of the list are no samples.
- A bad column fails only its sample, as an error (Batch.failures) naming
  the sample (its URL) and the field: invalid JSON in the JSON column, a
  line without the required caption column. The other samples arrive, and
  the stream's end counts the two failures.
- An optional (`required: false`) column missing on some lines arrives as
  None for those samples, and parsed for the others (read over TCP and the
  data socket, the other tests over the unix socket and shared memory).
"""

import io
import json

import numpy as np
import pytest

import conveyor
from conveyor_integration import Daemon, daemon_config, finish_daemons, pipeline_entry
from remote_fixtures import ObjectServer

N = 24  # samples of the full list
SIDE = 32  # images and output: 32x32
SEED = 7


def _color(i):
    """The solid colour of image i: far enough apart to tell images apart
    after JPEG and resampling."""
    return (40 + 8 * i, 230 - 8 * i, 60 + (i * 53) % 150)


def _caption(i):
    # Not ASCII, of varied length, with a `#` that is no comment mid-line.
    return "photo #%d: a caf\u00e9 \u2615%s" % (i, " x" * (i % 4))


def _meta(i):
    return {"w": 640 + i, "h": 480, "i": i, "tags": ["cat", "caf\u00e9"],
            "box": [1.5, 2.25, -3, 1e3], "ok": i % 2 == 0, "none": None,
            "nested": {"k": [i, {"deep": "x" * (i % 3)}]}}


def _meta_text(i):
    # Raw UTF-8 on odd lines, \u escapes on even ones: both are JSON.
    return json.dumps(_meta(i), ensure_ascii=bool(i % 2 == 0))


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """The object server over N small JPEGs, the URL lists and one daemon
    with the pipelines `full`, `bad` and `optional`; yields (daemon, urls,
    server), urls[i] the URL of image i."""
    from PIL import Image

    images = tmp_path_factory.mktemp("url-images")
    for i in range(N):
        buf = io.BytesIO()
        Image.new("RGB", (SIDE, SIDE), _color(i)).save(buf, format="JPEG", quality=95)
        (images / ("img_%02d.jpg" % i)).write_bytes(buf.getvalue())
    server = ObjectServer(images)
    try:
        base = server.base
        # Every fourth URL carries a query string (a presigned URL's secret):
        # the server ignores it, the key must not show it.
        urls = ["%s/img_%02d.jpg%s" % (base, i, "?sig=SECRET%d" % i if i % 4 == 3 else "")
                for i in range(N)]
        lists = tmp_path_factory.mktemp("url-lists")

        full = ["# URL<TAB>label<TAB>caption<TAB>meta", ""]
        for i, url in enumerate(urls):
            full.append("%s\t%d\t%s\t%s" % (url, i, _caption(i), _meta_text(i)))
            if i == 10:
                full += ["", "# a comment between samples"]
        (lists / "full.tsv").write_text("\n".join(full) + "\n", encoding="utf-8")

        # 8 samples: 2 has invalid JSON, 5 no caption (nor anything after its
        # label), 6 an empty caption (present: "").
        bad = []
        for i in range(8):
            if i == 5:
                bad.append("%s\t%d" % (urls[i], i))
                continue
            meta = '{"w": 640, "h": }' if i == 2 else _meta_text(i)
            bad.append("%s\t%d\t%s\t%s" % (urls[i], i, "" if i == 6 else _caption(i), meta))
        (lists / "bad.tsv").write_text("\n".join(bad) + "\n", encoding="utf-8")

        # meta (optional) missing on every third line.
        optional = []
        for i, url in enumerate(urls):
            line = "%s\t%d\t%s" % (url, i, _caption(i))
            optional.append(line if i % 3 == 0 else line + "\t" + _meta_text(i))
        (lists / "optional.tsv").write_text("\n".join(optional) + "\n", encoding="utf-8")

        def entry(name, fields, **kw):
            e = pipeline_entry("unused", augment="eval", size=SIDE, resize_size=SIDE,
                               max_batch_size=16, fields=fields, **kw)
            e["dataset"] = {"urls": str(lists / name)}
            return e

        caption = {"name": "caption", "column": 2, "type": "text"}
        meta = {"name": "meta", "column": 3, "type": "json"}
        key = {"name": "key", "type": "key"}
        pipelines = {
            "full": entry("full.tsv", [caption, meta, key], error_policy="fail_fast"),
            "bad": entry("bad.tsv", [caption, meta, key], max_failure_rate=1.0),
            "optional": entry("optional.tsv", [caption, dict(meta, required=False), key],
                              error_policy="fail_fast"),
        }
        cfg = daemon_config(lists, pipelines=pipelines, allowed_roots=[str(lists)])
        cfg["remote"] = {"initial_backoff_ms": 5, "max_backoff_ms": 50}
        # YAML is a superset of JSON: lists of maps written as JSON.
        d = Daemon(tmp_path_factory.mktemp("url-fields-daemon"), json.dumps(cfg))
        try:
            d.start()
            yield d, urls, server
        finally:
            finish_daemons([d])
    finally:
        server.stop()


def _read(address, pipeline, batch_size=8, **kw):
    """One epoch: ({label: what its sample delivered}, [failures], StreamEnd).
    Fails on a label delivered twice."""
    loader = conveyor.Loader(address, pipeline=pipeline, batch_size=batch_size, seed=SEED, **kw)
    got, failures = {}, []
    try:
        with loader.epoch(0) as stream:
            for b in stream:
                fields = {name: list(col) for name, col in b.fields.items()}
                for j in range(b.num_samples):
                    label = int(b.labels[j])
                    assert label not in got, "sample %d delivered twice" % label
                    got[label] = {"index": int(b.indices[j]),
                                  "color": np.asarray(b.images[j]).reshape(3, -1).mean(axis=1),
                                  **{name: values[j] for name, values in fields.items()}}
                failures += [(f.sample_index, f.path, f.reason) for f in b.failures]
            end = stream.end
        assert end is not None, "stream ended without StreamEnd"
    finally:
        loader.close()
    return got, failures, end


def _expected_key(url):
    """The key the daemon gives a URL sample: the URL, less a query string."""
    return url.split("?")[0] + "?\u2026" if "?" in url else url


def _check_image(i, sample):
    assert np.allclose(sample["color"], _color(i), atol=6), (i, sample["color"], _color(i))


def test_every_sample_once_with_its_own_columns_and_key(served):
    d, urls, server = served
    info = {p.name: p for p in conveyor.list_pipelines(d.unix)}
    assert [(f.name, f.required) for f in info["full"].fields] == [
        ("caption", True), ("meta", True), ("key", True)]

    got, failures, end = _read(d.unix, "full")
    assert failures == []
    assert sorted(got) == list(range(N)), "every sample exactly once"
    assert (end.samples, end.samples_failed) == (N, 0)
    for i, s in got.items():
        # The list's comments and blank lines are no samples: index = line's sample.
        assert s["index"] == i
        _check_image(i, s)
        assert s["caption"] == _caption(i)
        assert s["meta"] == _meta(i)
        assert s["key"] == _expected_key(urls[i])
        if i % 4 == 3:
            assert "SECRET" not in s["key"] and s["key"].startswith(urls[i].split("?")[0])
    # The keys tell the samples apart too: one per URL.
    assert len({s["key"] for s in got.values()}) == N
    # The images came over HTTP: the server answered a GET for each.
    served_paths = server.stats()["served"]
    assert all(served_paths.get("/img_%02d.jpg" % i) for i in range(N)), served_paths


def test_a_bad_column_fails_only_its_sample_naming_it_and_the_field(served):
    d, urls, _ = served
    got, failures, end = _read(d.unix, "bad", batch_size=4)
    assert sorted(got) == [0, 1, 3, 4, 6, 7], "the other samples arrive"
    for i, s in got.items():
        _check_image(i, s)
        assert s["caption"] == ("" if i == 6 else _caption(i))
        assert s["meta"] == _meta(i)
        assert s["key"] == _expected_key(urls[i])
    assert (end.samples, end.samples_failed) == (6, 2)

    reasons = {index: (path, reason) for index, path, reason in failures}
    assert sorted(reasons) == [2, 5], failures
    for index, (path, reason) in reasons.items():
        assert path == _expected_key(urls[index]), "the failure names its sample's URL"
    assert "field 'meta': not valid JSON" in reasons[2][1], reasons[2][1]
    assert "field 'caption': the line has no column 2 (a required field)" in reasons[5][1], \
        reasons[5][1]


def test_an_optional_column_missing_on_a_line_is_none(served):
    d, urls, _ = served
    info = {p.name: p for p in conveyor.list_pipelines(d.unix)}
    assert [(f.name, f.required) for f in info["optional"].fields] == [
        ("caption", True), ("meta", False), ("key", True)]

    got, failures, end = _read(d.tcp, "optional", transport="data_socket")
    assert failures == []
    assert sorted(got) == list(range(N))
    assert (end.samples, end.samples_failed) == (N, 0)
    for i, s in got.items():
        _check_image(i, s)
        assert s["caption"] == _caption(i)
        assert s["key"] == _expected_key(urls[i])
        if i % 3 == 0:
            assert s["meta"] is None, (i, s["meta"])
        else:
            assert s["meta"] == _meta(i)
    assert sum(s["meta"] is None for s in got.values()) == N // 3

