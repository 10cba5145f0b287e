"""`cmake --install` installs conveyord, its systemd unit (with ExecStart at
the installed binary, whatever --prefix says) and an example config; the
installed unit passes `systemd-analyze verify`, which parses every setting
and checks that the commands it runs exist. Its ExecStartPre checks the
config's fields only (--no-data), and that check passes on the installed
example config without its data."""

import os
import shutil
import subprocess

import pytest

from conveyor_integration import BUILD_DIR, require_daemon, scaled

UNIT = "lib/systemd/system/conveyord.service"


def _systemd_analyze():
    path = shutil.which("systemd-analyze")
    if path is None:
        pytest.fail("systemd-analyze not found: scripts/install-deps.sh installs it (package "
                    "systemd)")
    return path


@pytest.fixture(scope="module")
def prefix(tmp_path_factory):
    require_daemon()
    prefix = tmp_path_factory.mktemp("prefix")
    r = subprocess.run(["cmake", "--install", str(BUILD_DIR), "--prefix", str(prefix)],
                       capture_output=True, text=True, timeout=scaled(120))
    assert r.returncode == 0, r.stdout + r.stderr
    return prefix


def test_install_puts_binary_unit_and_example_config(prefix):
    binary = prefix / "bin" / "conveyord"
    assert os.access(binary, os.X_OK), binary
    assert (prefix / "share" / "conveyor" / "examples" / "conveyord.yaml").is_file()
    lines = (prefix / UNIT).read_text().splitlines()
    assert "Type=notify" in lines
    assert "ExecReload=/bin/kill -HUP $MAINPID" in lines
    assert "ExecStart=%s --config ${CONFIG}" % binary in lines
    # The schema check only: ExecStart indexes the datasets, once.
    assert "ExecStartPre=%s --config ${CONFIG} --check-config --no-data" % binary in lines
    r = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0 and r.stdout.startswith("conveyord "), r.stdout + r.stderr


def test_installed_unit_passes_systemd_analyze_verify(prefix):
    r = subprocess.run([_systemd_analyze(), "verify", str(prefix / UNIT)], capture_output=True,
                       text=True, timeout=scaled(60))
    assert r.returncode == 0 and not (r.stdout + r.stderr).strip(), r.stdout + r.stderr


def test_systemd_analyze_verify_catches_a_broken_unit(prefix, tmp_path):
    # The check above can fail: a typo and a missing binary are reported.
    text = (prefix / UNIT).read_text().replace("Type=notify", "Type=notifyy").replace(
        str(prefix / "bin" / "conveyord"), str(tmp_path / "missing" / "conveyord"))
    broken = tmp_path / "conveyord.service"
    broken.write_text(text)
    r = subprocess.run([_systemd_analyze(), "verify", str(broken)], capture_output=True,
                       text=True, timeout=scaled(60))
    out = r.stdout + r.stderr
    assert r.returncode != 0, out
    assert "notifyy" in out and "is not executable" in out, out


def test_unit_check_passes_without_the_data_the_full_check_needs(prefix):
    # The example config names datasets under /data that this host lacks:
    # ExecStartPre's schema check passes, the full check (what ExecStart
    # does before it listens) refuses the missing dataset.
    binary = str(prefix / "bin" / "conveyord")
    example = str(prefix / "share" / "conveyor" / "examples" / "conveyord.yaml")
    assert not os.path.exists("/data/imagenet/train"), "this host has the example's data"
    r = subprocess.run([binary, "--config", example, "--check-config", "--no-data"],
                       capture_output=True, text=True, timeout=scaled(60))
    assert r.returncode == 0, r.stdout + r.stderr
    assert ": OK: " in r.stdout and "--no-data" in r.stdout, r.stdout
    r = subprocess.run([binary, "--config", example, "--check-config"], capture_output=True,
                       text=True, timeout=scaled(60))
    assert r.returncode == 2, r.stdout + r.stderr
    assert "dataset" in r.stderr and "/data/imagenet" in r.stderr, r.stderr
