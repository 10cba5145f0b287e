"""Fair sharing of the daemon's workers between clients (per_client.weight,
access.tokens[i].weight; core/engine/scheduler.h): two real clients of
different identities (two bearer tokens, weights 2 and 1) read endless
streams of a CPU-bound pipeline at once, as fast as they can; over the same
window the first gets 2:1 ± 10% of the images the second gets. The ratio is
of counts over one window, not a speed: a slow or loaded host makes the
window longer, not the ratio other.
"""

import secrets

from conveyor_integration import (Daemon, EndlessReader, _yaml, conveyor, daemon_config,
                                  finish_daemons, make_image_folder, pipeline_entry, wait_until)

BATCH = 8


def token_file(path):
    token = secrets.token_hex(32)
    path.write_text(token + "\n")
    path.chmod(0o600)
    return token


def test_two_clients_of_weights_2_and_1_get_2_to_1_of_the_images(tmp_path):
    # Large JPEGs to a small output: decoding is what costs, on 2 workers.
    root, _ = make_image_folder(tmp_path / "big", classes=2, per_class=12, min_side=480,
                                max_side=640)
    heavy, light = token_file(tmp_path / "heavy"), token_file(tmp_path / "light")
    cfg = daemon_config(root, pipelines={"train": pipeline_entry(root)}, threads=2)
    text = _yaml(cfg) + "\n"
    # conftest's YAML writer does not nest maps in lists: written by hand.
    text += "access:\n  tokens:\n"
    text += "    - {name: heavy, file: '%s', weight: 2}\n" % (tmp_path / "heavy")
    text += "    - {name: light, file: '%s'}\n" % (tmp_path / "light")
    text += "per_client: {weight: 1}\n"
    d = Daemon(tmp_path / "daemon", text)
    readers = []
    try:
        d.start()
        readers = [EndlessReader(d.unix, batch_size=BATCH, credits=16, token=heavy),
                   EndlessReader(d.unix, batch_size=BATCH, credits=16, token=light)]
        for r in readers:
            r.start()
        h, lt = readers
        # Past the start: both streams run.
        assert wait_until(lambda: h.images >= 4 * BATCH and lt.images >= 4 * BATCH or h.error
                          or lt.error, timeout=30), (h.images, lt.images)
        assert h.error is None and lt.error is None, (h.error, lt.error)
        h0, lt0 = h.images, lt.images
        # A window of 3000 images between them.
        assert wait_until(lambda: (h.images - h0) + (lt.images - lt0) >= 3000 or h.error
                          or lt.error, timeout=60), (h.images - h0, lt.images - lt0)
        dh, dl = h.images - h0, lt.images - lt0
        assert h.error is None and lt.error is None, (h.error, lt.error)
        # The daemon saw two clients, one per token.
        st = conveyor.stats(d.unix)
        assert st.streams_open == 2
    finally:
        for r in readers:
            r.stop()
        finish_daemons([d])
    ratio = dh / dl
    print("heavy %d images, light %d: ratio %.3f" % (dh, dl, ratio))
    assert 1.8 <= ratio <= 2.2, "heavy %d images, light %d: ratio %.3f" % (dh, dl, ratio)
