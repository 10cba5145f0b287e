"""`conveyor top` and the fetch progress bar on a real terminal: each runs in
a tmux pane (a private tmux server per test) against a real daemon; the
pane's text is read with capture-pane. Checks that the view appears and
updates, marks the bottleneck under load, survives a tiny terminal and a
daemon that goes away, quits with exit 0 on q and Ctrl-C, and leaves the
terminal as it found it (normal screen, canonical mode, echo)."""

import os
import re
import shlex
import shutil
import subprocess
import threading
import time
import uuid

import pytest

import conveyor
from conveyor_integration import CLI, PYTHON, client_env, daemon_config, scaled

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None,
                                reason="tmux not installed (scripts/install-deps.sh)")


class Pane:
    """One tmux session on a private server, running `command` in sh; after
    it the shell prints EXIT=<status> and the terminal's settings, then
    waits, so the pane can still be read."""

    def __init__(self, tmp_path, command, width=200, height=45):
        self.server = "conveyor-test-%s" % uuid.uuid4().hex[:12]
        script = tmp_path / ("pane-%s.sh" % self.server)
        env = client_env()
        exports = "".join("export %s=%s\n" % (k, shlex.quote(env[k]))
                          for k in ("PYTHONPATH", "PATH", "CONVEYOR_TEST_TIMEOUT_SCALE")
                          if k in env)
        # The shell outlives a Ctrl-C meant for the command (a trap, not an
        # ignored signal: the command gets SIGINT's default back).
        script.write_text("trap : INT\n%s%s\necho EXIT=$?\nstty -a | tr ' ;' '\\n\\n' | "
                          "grep -E '^-?(icanon|echo)$' | tr '\\n' ' '\necho STTY-DONE\n"
                          "sleep 600\n" % (exports, command))
        self._tmux("new-session", "-d", "-s", "t", "-x", str(width), "-y", str(height),
                   "sh %s" % shlex.quote(str(script)))

    def _tmux(self, *args):
        return subprocess.run(["tmux", "-L", self.server, "-f", "/dev/null"] + list(args),
                              capture_output=True, text=True, timeout=scaled(20), check=True,
                              env={**os.environ, "TERM": "screen"}).stdout

    def text(self):
        return self._tmux("capture-pane", "-p", "-t", "t")

    def display(self, fmt):
        return self._tmux("display-message", "-p", "-t", "t", fmt).strip()

    def keys(self, *keys):
        self._tmux("send-keys", "-t", "t", *keys)

    def resize(self, width, height):
        self._tmux("resize-window", "-t", "t", "-x", str(width), "-y", str(height))

    def wait_for(self, predicate, what, timeout=30):
        deadline = time.monotonic() + scaled(timeout)
        text = self.text()
        while not predicate(text):
            if time.monotonic() > deadline:
                pytest.fail("pane never showed %s; it shows:\n%s" % (what, text))
            time.sleep(0.1)
            text = self.text()
        return text

    def wait_exit(self):
        """The command's exit status, once the shell has printed it and the
        terminal settings after it."""
        text = self.wait_for(lambda t: "STTY-DONE" in t, "the command's end")
        return int(re.search(r"EXIT=(\d+)", text).group(1)), text

    def close(self):
        subprocess.run(["tmux", "-L", self.server, "kill-server"], capture_output=True,
                       timeout=scaled(20))


@pytest.fixture
def pane(tmp_path):
    panes = []

    def start(command, **kwargs):
        p = Pane(tmp_path, command, **kwargs)
        panes.append(p)
        return p

    yield start
    for p in panes:
        p.close()


def cli(*args):
    return " ".join(shlex.quote(str(a)) for a in [PYTHON, CLI] + list(args))


class Load:
    """A client reading an endless stream in a thread: the daemon is busy."""

    def __init__(self, address):
        self.stop = threading.Event()
        self.loader = conveyor.Loader(address, pipeline="train", batch_size=8, credits=2)
        self.thread = threading.Thread(target=self._read)
        self.thread.start()

    def _read(self):
        try:
            with self.loader.stream(num_epochs=0) as stream:
                for _ in stream:
                    if self.stop.is_set():
                        return
        except conveyor.ConveyorError:
            pass  # the daemon was stopped under it

    def close(self):
        self.stop.set()
        self.thread.join(scaled(30))
        self.loader.close()


def uptime(text):
    m = re.search(r"uptime (\d+\.\d) s", text)
    return m and m.group(1)


def assert_terminal_restored(pane, text):
    assert pane.display("#{alternate_on}") == "0", "still on the alternate screen"
    assert pane.display("#{cursor_flag}") == "1", "cursor left hidden"
    settings = text[text.index("EXIT="):].split()
    assert "icanon" in settings and "echo" in settings, settings
    assert "Traceback" not in text, text


def test_top_shows_updates_marks_the_bottleneck_and_quits_on_q(daemon_factory, dataset, pane):
    d = daemon_factory(daemon_config(dataset[0]))
    load = Load(d.unix)
    try:
        p = pane(cli("top", "--server", d.unix, "--interval", "0.3"))
        first = p.wait_for(lambda t: "decode" in t and "samples/s" in t, "the stage table")
        assert "conveyor top  %s" % d.unix in first
        assert re.search(r"^stage +in +out +busy +queue +in flight +failed", first, re.M), first
        p.wait_for(lambda t: uptime(t) and uptime(t) != uptime(first), "a refresh")
        text = p.wait_for(lambda t: re.search(r"^\w+ .*<- bottleneck$", t, re.M),
                          "a bottleneck under load")
        assert re.search(r"^bottleneck: (sample|fetch|decode|collate|deliver)$", text, re.M)
        stream = conveyor.stats(d.unix).streams[0]
        row = next(line for line in text.splitlines()
                   if line.split()[:2] == [str(stream.stream_id), "train"])
        assert re.search(r" \d+/2 ", row), row  # credits in use of 2
        assert "pid %d" % os.getpid() in row  # the client: this process
        p.keys("q")
        status, text = p.wait_exit()
    finally:
        load.close()
    assert status == 0, text
    assert "conveyor top" not in text  # the view went with the alternate screen
    assert_terminal_restored(p, text)


def test_top_says_no_load_when_idle_and_quits_on_ctrl_c(daemon, pane):
    p = pane(cli("top", "--server", daemon.unix, "--interval", "0.2"))
    text = p.wait_for(lambda t: "bottleneck: none (no load)" in t, "the idle status")
    assert "<- bottleneck" not in text
    p.keys("C-c")
    status, text = p.wait_exit()
    assert status == 0, text
    assert_terminal_restored(p, text)


def test_top_in_a_tiny_terminal_then_a_normal_one(daemon, pane):
    p = pane(cli("top", "--server", daemon.unix, "--interval", "0.2"), width=100, height=30)
    p.wait_for(lambda t: "deliver" in t, "the stage table")
    p.resize(20, 3)
    p.wait_for(lambda t: "terminal too small" in t, "the size message")
    p.resize(100, 12)
    p.wait_for(lambda t: "more line(s)" in t or "no stream open" in t, "a cut view")
    p.resize(100, 30)
    p.wait_for(lambda t: "deliver" in t and "no stream open" in t, "the whole view again")
    p.keys("q")
    status, text = p.wait_exit()
    assert status == 0, text
    assert_terminal_restored(p, text)


def test_top_outlives_its_daemon(daemon_factory, dataset, pane):
    d = daemon_factory(daemon_config(dataset[0]))
    p = pane(cli("top", "--server", d.unix, "--interval", "0.2"))
    p.wait_for(lambda t: "deliver" in t, "the stage table")
    d.stop(timeout=scaled(10))
    text = p.wait_for(lambda t: "daemon unavailable:" in t and "(retrying)" in t,
                      "the unavailable message")
    assert "Traceback" not in text
    p.keys("q")
    status, text = p.wait_exit()
    assert status == 0, text
    assert_terminal_restored(p, text)


def test_fetch_progress_bar_is_gone_from_the_terminal_at_the_end(daemon, pane, tmp_path):
    """The bar is drawn (test_cli.py sees it in the pseudo-terminal's
    output) and erased: the summary takes its line, nothing is left."""
    p = pane(cli("fetch", "--server", daemon.unix, "--pipeline", "train", "--batches", 30,
                 "--batch-size", 8, "--out", tmp_path / "b"))
    status, text = p.wait_exit()
    assert status == 0, text
    assert not re.search(r"/30 batches|\[[#.]+\]", text), text
    assert re.search(r"^fetched 30 batches, 240 images", text, re.M), text


def test_fetch_draws_no_bar_when_stdout_is_piped(daemon, pane, tmp_path):
    log = tmp_path / "fetch.out"
    p = pane(cli("fetch", "--server", daemon.unix, "--pipeline", "train", "--batches", 30,
                 "--batch-size", 8, "--out", tmp_path / "b") + " | cat > %s" % shlex.quote(str(log)))
    status, text = p.wait_exit()
    assert status == 0, text
    assert "batches  " not in text and "[#" not in text, text  # nothing on the terminal
    out = log.read_text()
    assert out.startswith("fetched 30 batches") and "\r" not in out, out
