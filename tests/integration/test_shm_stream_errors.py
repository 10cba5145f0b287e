"""A SHARED_MEMORY stream that fails before its first batch reaches the
Python client with its own error, not with the fd hand-over's refusal
(issue 26, low item).

The daemon forgets a stream's memfd when the stream ends; a client that
asks for it after that is refused ("fd hand-over refused (status 1)"),
which hid why the stream ended. The race is made certain here: the
client's hand-over waits until the daemon has no stream open any more."""

import conveyor
import conveyor._shm
import pytest
from conveyor_integration import daemon_config, pipeline_entry, wait_until


@pytest.fixture
def broken_folder(tmp_path):
    """A class folder of files that are no images at all: every sample fails."""
    root = tmp_path / "broken"
    (root / "class_a").mkdir(parents=True)
    for i in range(8):
        (root / "class_a" / ("img_%03d.jpg" % i)).write_bytes(b"not a picture %d\n" % i * 64)
    return root


def test_a_stream_failing_before_its_first_batch_reports_its_own_error(
        daemon_factory, broken_folder, monkeypatch):
    d = daemon_factory(daemon_config(broken_folder, pipelines={
        "broken": pipeline_entry(broken_folder, error_policy="fail_fast")}), name="broken")
    real_receive = conveyor._shm.SharedRegion.receive.__func__

    def late_receive(cls, *args, **kwargs):
        # The stream has failed and ended on the daemon's side by now.
        assert wait_until(d.idle, 30.0), d.log_tail()
        return real_receive(cls, *args, **kwargs)

    monkeypatch.setattr(conveyor._shm.SharedRegion, "receive", classmethod(late_receive))
    loader = conveyor.Loader(d.unix, pipeline="broken", batch_size=4, credits=2,
                             transport="shared_memory")
    try:
        with pytest.raises(conveyor.ConveyorError) as info:
            with loader.epoch(0) as stream:
                next(stream)
    finally:
        loader.close()
    message = str(info.value)
    assert "hand-over" not in message, message
    assert isinstance(info.value, conveyor.DataError), repr(info.value)
    assert "img_00" in message, message
