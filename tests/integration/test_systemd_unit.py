"""`cmake --install` installs conveyord, its systemd unit (with ExecStart at
the installed binary, whatever --prefix says) and an example config; the
installed unit passes `systemd-analyze verify`, which parses every setting
and checks that the commands it runs exist."""

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
    assert "ExecStartPre=%s --config ${CONFIG} --check-config" % binary in lines
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
