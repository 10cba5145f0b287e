"""`kind: audio` pipelines through a real conveyord and the Python client.

A list-file dataset of sines made by the `ffmpeg` CLI (WAV, FLAC, MP3,
Opus, AAC; 8/44.1/48 kHz; mono and stereo). Eval batches are float32
[N, C, L] whose every sample equals the centre window of `ffmpeg`'s own
decode + resample (tests/support/audio_media.py); the Loader, the torch
adapter, `conveyor pipelines --json` and `conveyor fetch` see that shape.
Train streams are deterministic and resume exactly (as for images,
test_training_resume.py). Hostile files fail as samples, each reported with
its path and reason, and the stream goes on.
"""
import json
import subprocess
import sys

import numpy as np
import pytest
import torch

import conveyor
import conveyor.torch
from conveyor_integration import (CLI, PYTHON, SOURCE_DIR, client_env, collect, daemon_config,
                                  read_epoch, write_list_file)

sys.path.insert(0, str(SOURCE_DIR / "tests" / "support"))
import audio_media as am  # noqa: E402

RATE = 16000
CLIP = 8000  # half a second
FILES = [("wav_s16", 44100, 2, 2.0), ("flac", 48000, 1, 1.5), ("mp3", 44100, 1, 2.0),
         ("opus", 48000, 2, 1.2), ("aac_m4a", 8000, 1, 2.0), ("wav_f32", 8000, 2, 0.3),
         ("vorbis", 44100, 2, 1.0), ("wav_s24", 48000, 1, 3.0)] * 2
SEED = 4


@pytest.fixture(scope="module")
def audio_set(tmp_path_factory):
    root = tmp_path_factory.mktemp("audio") / "data"
    root.mkdir()
    entries = []
    for i, (codec, rate, channels, seconds) in enumerate(FILES):
        path = am.make_sine(root / ("clip%02d" % i), codec, rate, channels, seconds)
        entries.append((path.split("/")[-1], i % 3))
    write_list_file(root / "train.txt", entries)
    return root, entries


def _pipe(root, augment, **audio):
    spec = {"sample_rate": RATE, "channels": 1, "clip_samples": CLIP}
    spec.update(audio)
    return {"dataset": {"list": str(root / "train.txt")}, "kind": "audio", "augment": augment,
            "max_batch_size": 16, "error_policy": "skip", "audio": spec}


@pytest.fixture
def audio_daemon(daemon_factory, audio_set):
    root, _ = audio_set
    cfg = daemon_config(root, pipelines={
        "train": _pipe(root, "train"),
        "eval": _pipe(root, "eval", channels=2),
    })
    return daemon_factory(cfg, name="audio", tcp=False)


def test_pipeline_info_says_audio(audio_daemon):
    info = {p.name: p for p in conveyor.list_pipelines(audio_daemon.unix)}
    assert info["train"].kind == "audio"
    assert list(info["train"].sample_shape) == [1, CLIP]
    assert list(info["eval"].sample_shape) == [2, CLIP]
    res = subprocess.run([PYTHON, str(CLI), "pipelines", "--server", audio_daemon.unix, "--json"],
                         capture_output=True, text=True, timeout=60, env=client_env())
    assert res.returncode == 0, res.stderr
    row = {p["name"]: p for p in json.loads(res.stdout)["pipelines"]}["eval"]
    assert (row["kind"], row["sample_shape"], row["dtype"]) == ("audio", [2, CLIP], "float32")


def test_eval_batches_equal_ffmpegs_centre_windows(audio_daemon, audio_set):
    root, entries = audio_set
    ep = read_epoch(audio_daemon.unix, pipeline="eval", batch_size=5, shuffle=False)
    assert ep.images.dtype == np.float32 and ep.images.shape == (len(FILES), 2, CLIP)
    for idx, clip in zip(ep.indices.tolist(), ep.images):
        ref = am.reference(root / entries[idx][0], RATE, 2)
        n = ref.shape[1]
        start = max(0, (n - CLIP) // 2)
        valid = min(CLIP, n)
        np.testing.assert_allclose(clip[:, :valid], ref[:, start:start + valid], rtol=0, atol=1e-6,
                                   err_msg=entries[idx][0])
        assert not clip[:, valid:].any(), "padding not zero"
    assert ep.labels.tolist() == [entries[i][1] for i in ep.indices.tolist()]


def test_torch_adapter_and_fetch_take_audio_batches(audio_daemon, tmp_path):
    loader = conveyor.torch.TorchLoader(audio_daemon.unix, pipeline="train", batch_size=4, seed=1)
    x, y = next(iter(loader))
    assert x.dtype == torch.float32 and tuple(x.shape) == (4, 1, CLIP)
    assert y.dtype == torch.int64
    del x, y
    loader.close()
    out = tmp_path / "fetched"
    res = subprocess.run([PYTHON, str(CLI), "fetch", "--server", audio_daemon.unix, "--pipeline",
                          "eval", "--batch-size", "3", "--batches", "2", "--out", str(out)],
                         capture_output=True, text=True, timeout=120, env=client_env())
    assert res.returncode == 0, res.stderr
    with np.load(out / "batch_00001.npz") as z:
        assert z["images"].dtype == np.float32 and z["images"].shape == (3, 2, CLIP)


def _train(address, **kw):
    return conveyor.Loader(address, pipeline="train", batch_size=4, seed=SEED, **kw)


def test_train_streams_are_deterministic_and_resume_exactly(audio_daemon):
    def run_all(epochs=2):
        loader = _train(audio_daemon.unix)
        with loader.stream(num_epochs=epochs) as stream:
            got = [b.copy() for b in stream]
        loader.close()
        return got

    ref = run_all()
    again = run_all()
    assert collect(ref)[2].tobytes() == collect(again)[2].tobytes()
    # Random crops: the same file gets other windows in another epoch.
    e0 = {i: x.tobytes() for b in ref if b.epoch == 0 for i, x in zip(b.indices, b.images)}
    e1 = {i: x.tobytes() for b in ref if b.epoch == 1 for i, x in zip(b.indices, b.images)}
    assert sum(e0[i] != e1[i] for i in e0) >= len(e0) // 2

    loader = _train(audio_daemon.unix, credits=3)
    with loader.stream(num_epochs=2) as stream:
        got = [next(stream).copy() for _ in range(5)]
    state = loader.state_dict()
    loader.close()
    assert (state["epoch"], state["offset"]) == (1, 4)
    loader = _train(audio_daemon.unix)
    loader.load_state_dict(state)
    with loader.stream(num_epochs=2 - loader.current_epoch) as stream:
        got += [b.copy() for b in stream]
    loader.close()
    gi, gl, gx = collect(got)
    ri, rl, rx = collect(ref)
    assert gi.tolist() == ri.tolist() and gl.tolist() == rl.tolist()
    assert gx.tobytes() == rx.tobytes(), "resumed audio differs from the uninterrupted run"


def test_hostile_audio_fails_per_sample_with_its_name(daemon_factory, tmp_path):
    root = tmp_path / "hostile"
    root.mkdir()
    good = am.make_sine(root / "good", "wav_s16", 16000, 1, 1.0)
    flac = am.make_sine(root / "full", "flac", 44100, 2, 2.0)
    data = open(flac, "rb").read()
    (root / "truncated.flac").write_bytes(data[:len(data) // 2])
    (root / "corrupt.wav").write_bytes(b"RIFF\xff\xff\xff\x7fWAVEfmt " + bytes(range(256)) * 8)
    long_mp3 = am.make_sine(root / "long", "mp3", 8000, 1, 30)
    names = ["good.wav", "truncated.flac", "corrupt.wav", "long.mp3", "good.wav"]
    write_list_file(root / "list.txt", [(n, 0) for n in names])
    pipe = _pipe(root, "eval", max_duration_seconds=10)
    pipe["dataset"] = {"list": str(root / "list.txt")}
    d = daemon_factory(daemon_config(root, pipelines={"p": pipe}), name="audio-hostile",
                       tcp=False)
    loader = conveyor.Loader(d.unix, pipeline="p", batch_size=5, shuffle=False)
    with loader.epoch(0) as stream:
        batches = [b.copy() for b in stream]
    loader.close()
    assert sum(b.num_samples for b in batches) == 2
    reasons = {f.path.split("/")[-1]: f.reason for b in batches for f in b.failures}
    assert set(reasons) == {"truncated.flac", "corrupt.wav", "long.mp3"}, reasons
    assert "audio: decoding" in reasons["truncated.flac"]
    assert "audio: not a recognised media file" in reasons["corrupt.wav"]
    assert "max_duration_seconds (10 s)" in reasons["long.mp3"]
    del good, long_mp3
