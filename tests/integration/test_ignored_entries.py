"""Entries of a dataset that the index leaves out are never silent: the daemon
logs one line per dataset counting them by reason with a few escaped example
names, so `conveyord --check-config` shows an operator what a tree holds that
will not be served."""

import subprocess

from conveyor_integration import (CONVEYORD, daemon_config, make_image_folder, pipeline_entry,
                                  require_daemon, scaled, write_config)


def test_check_config_reports_ignored_entries(tmp_path):
    require_daemon()
    root, samples = make_image_folder(tmp_path / "images", classes=2, per_class=2)
    (root / "class_a" / "labels.csv").write_text("x")
    (root / "class_a" / "evil\nname.txt").write_text("x")
    (root / "class_b" / ".DS_Store").write_text("x")
    (root / "README.md").write_text("x")
    (root / "class_b" / "extra").mkdir()
    config = write_config(tmp_path / "conveyord.yaml", daemon_config(
        root, pipelines={"train": pipeline_entry(root)}))
    done = subprocess.run([str(CONVEYORD), "--config", str(config), "--check-config"],
                          capture_output=True, text=True, timeout=scaled(60))
    assert done.returncode == 0, done.stderr
    assert "1 pipeline(s)" in done.stdout and "(%d samples)" % len(samples) in done.stdout
    lines = [line for line in done.stderr.splitlines() if "entries ignored" in line]
    assert len(lines) == 1, done.stderr
    line = lines[0]
    assert "5 entries ignored: " in line, line
    assert "2 without an image extension (e.g. 'class_a/evil\\nname.txt', " \
        "'class_a/labels.csv')" in line, line
    assert "1 hidden (name starts with '.') (e.g. 'class_b/.DS_Store')" in line, line
    assert "(e.g. 'README.md')" in line, line
    assert "1 folders inside class folders (not descended into) (e.g. 'class_b/extra')" in line
