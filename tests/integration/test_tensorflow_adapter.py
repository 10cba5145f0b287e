"""conveyor.tensorflow with the real TensorFlow (tensorflow-cpu from PyPI,
scripts/venvs/tensorflow.txt) against a real daemon: the tf.data element
spec comes from PipelineInfo, a prefetched dataset's batches equal the plain
Loader's byte for byte on every transport, its cardinality is asserted and
its prefetch covered by the stream's credits (no copies, no warning), DLPack hands the slot over
without a copy when asked (buffer addresses), Keras model.fit trains over
the dataset, and the TensorFlow training example trains. The TensorFlow
code runs in the virtual environment's interpreter
(frameworks/tensorflow_checks.py); the daemon and the reference batches in
this process.

Release stage only: it tests the adapter, not the daemon.
"""

import importlib.util
import json
import re
import math
import subprocess
import sys

import numpy as np
import pytest

import conveyor_integration as ci

CHECKS = ci.SOURCE_DIR / "tests" / "integration" / "frameworks" / "tensorflow_checks.py"
EXAMPLE = ci.CLIENT_DIR / "examples" / "train_tensorflow.py"


@pytest.fixture(scope="module")
def tf_python():
    return ci.venv_python("tensorflow")


def tf_env():
    env = ci.client_env()
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    env["CUDA_VISIBLE_DEVICES"] = ""
    return env


def run_checks(python, check, server, out, *args):
    r = subprocess.run([python, str(CHECKS), check, "--server", server, "--out", str(out)]
                       + list(args), capture_output=True, text=True, env=tf_env(),
                       timeout=ci.scaled(300))
    assert r.returncode == 0, "tensorflow_checks %s failed (%d):\n%s\n%s" % (
        check, r.returncode, r.stdout[-3000:], r.stderr[-6000:])
    return json.loads((out / "result.json").read_text())


def test_element_spec_from_pipeline_info(tf_python, daemon_factory, dataset, tmp_path):
    root, _ = dataset
    d = daemon_factory(ci.daemon_config(root, pipelines={
        "u8": ci.pipeline_entry(root),
        "f32": ci.pipeline_entry(root, dtype="float32", layout="nhwc", size=48)}))
    u8 = run_checks(tf_python, "spec", d.unix, tmp_path, "--pipeline", "u8")
    assert u8["images"] == [[None, 3, ci.IMAGE_SIZE, ci.IMAGE_SIZE], "uint8"]
    assert u8["labels"] == [[None], "int64"]
    assert "copy=False is not allowed" in u8["copy_false_refused"]
    f32 = run_checks(tf_python, "spec", d.unix, tmp_path, "--pipeline", "f32")
    assert f32["images"] == [[None, 48, 48, 3], "float32"]


@pytest.mark.parametrize("transport", ["shared_memory", "data_socket", "inline"])
def test_prefetched_dataset_equals_plain_loader(tf_python, daemon, tmp_path, transport):
    address = daemon.unix if transport == "shared_memory" else daemon.tcp
    result = run_checks(tf_python, "epoch", address, tmp_path, "--transport", transport)
    want = ci.read_epoch(address, transport=transport)
    assert want.transport == transport
    assert result["batches"] == want.batches_per_epoch == 6
    assert result["images_dtype"] == "uint8" and result["labels_dtype"] == "int64"
    assert result["next_epoch"] == 1  # the loader advanced past the epoch
    with np.load(tmp_path / "epoch.npz") as z:
        images, labels = z["images"], z["labels"]
    assert images.shape == want.images.shape
    assert images.tobytes() == want.images.tobytes()
    np.testing.assert_array_equal(labels, want.labels)


def test_dlpack_is_zero_copy_and_default_copies_reused_slots(tf_python, daemon, tmp_path):
    result = run_checks(tf_python, "pointers", daemon.unix, tmp_path)
    assert len(result["false"]) == 6
    assert all(result["aligned"]), result  # slots start on 64-byte boundaries
    assert all(result["false"]), result    # copy=False: TensorFlow's buffer is the slot
    assert not any(result["true"]), result
    # copy="auto": the slot only when the loader keeps it leased while views live.
    assert result["auto"] == result["lease"], result


def test_keras_fit(tf_python, daemon, tmp_path):
    result = run_checks(tf_python, "fit", daemon.unix, tmp_path)
    assert len(result["loss"]) == 2 and all(math.isfinite(v) for v in result["loss"]), result
    # Each Keras epoch read one loader epoch to its end.
    assert result["state"]["epoch"] == 2 and result["state"]["offset"] == 0, result
    # Keras knew the steps of each epoch (6/6, not 1/Unknown): the asserted cardinality.
    assert result["cardinality"] == 6 and result["keras_steps"] == [6, 6], result
    # The elements are the leased slots (safe lifetime), and the credits
    # dataset() raised cover its prefetch: no batch was copied out for want
    # of credits, so no warning.
    assert result["lease"] == "safe", result
    assert result["credits"][0] == 3 and result["credits"][1] >= 2 + 3, result
    assert result["warnings"] == [], result


def test_cardinality_credits_and_prefetch(tf_python, daemon, tmp_path):
    r = run_checks(tf_python, "cardinality", daemon.unix, tmp_path)
    assert r["batches_per_epoch"] == 6
    assert (r["epochs_1"], r["epochs_2"], r["epochs_0"]) == (6, 12, r["infinite"]), r
    assert r["credits_prefetch_5"] == r["credits_needed_5"] >= 5 + 3, r
    # Two elements read, then a second pass of a dataset asserting 6: refused
    # at once, saying why.
    assert r["first_pass"] == 2
    taken = r["state_after_take"]
    assert taken["epoch"] == 0 and taken["offset"] == 16, taken
    assert r["short_pass_error"] and "resumes mid-epoch" in r["short_pass_error"], r
    # Made mid-epoch: cardinality unknown, and the pass reads the rest of the epoch.
    assert r["resumed_cardinality"] == r["unknown"], r
    assert r["resumed_pass"] == 6 - 2, r
    assert r["after_resumed"]["epoch"] == 1 and r["after_resumed"]["offset"] == 0, r
    assert all(e and "prefetch must be a number of elements" in e for e in r["refused_prefetch"]), r
    assert r["numpy_prefetch"] == 6, r  # any integer type


def test_training_example_runs(tf_python, daemon):
    r = subprocess.run([tf_python, str(EXAMPLE), "--server", daemon.unix, "--pipeline", "train",
                        "--batch-size", "8", "--steps", "8"], capture_output=True, text=True,
                       env=tf_env(), timeout=ci.scaled(300))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-6000:]
    steps = [line for line in r.stdout.splitlines() if line.startswith("step ")]
    assert len(steps) == 8, r.stdout
    assert "data wait" in steps[0] and "compute" in steps[0], steps[0]
    assert "mean data wait" in r.stdout, r.stdout


def test_without_tensorflow_names_the_package():
    if importlib.util.find_spec("tensorflow") is not None:
        pytest.skip("%s has TensorFlow installed" % sys.executable)
    code = ("import conveyor.tensorflow as ct\n"
            "try:\n    ct.dataset(None)\nexcept ImportError as e:\n    print(e)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env=ci.client_env(), timeout=ci.scaled(60))
    assert r.returncode == 0, r.stderr
    assert "pip install tensorflow-cpu" in r.stdout, r.stdout


def test_readme_snippet_runs(tf_python, daemon):
    """The quick start of client/python/README.md, as written."""
    text = (ci.CLIENT_DIR / "README.md").read_text()
    blocks = [b for b in re.findall(r"```python\n(.*?)```", text, re.S)
              if "# conveyor.tensorflow quick start" in b]
    assert len(blocks) == 1, "README.md has %d tensorflow quick starts" % len(blocks)
    env = tf_env()
    env["CONVEYOR_SERVER"] = daemon.unix
    r = subprocess.run([tf_python, "-c", blocks[0]], capture_output=True, text=True, env=env,
                       timeout=ci.scaled(300))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-6000:]
    # Keras' progress bar knows the epoch's steps (48 samples / 8), and no
    # epoch ran out of credits (the warning of copied batches).
    assert "6/6" in r.stdout and "Unknown" not in r.stdout, r.stdout[-3000:]
    assert "still referenced" not in r.stderr, r.stderr[-3000:]
