"""tests/support/skipped_exit.py, the plugin of the CTest entries: a file
whose tests were all skipped exits 77 (CTest: Skipped); one where something
ran keeps pytest's own exit code."""

import subprocess
import sys
from pathlib import Path

import pytest

SUPPORT = Path(__file__).resolve().parents[1] / "support"

CASES = {
    "all_skipped": ("import pytest\n"
                    "pytestmark = pytest.mark.skip(reason='needs root: test')\n"
                    "def test_a(): pass\n"
                    "def test_b(): pass\n", 77),
    "module_skipped": ("import pytest\n"
                       "pytest.skip('not here', allow_module_level=True)\n", 77),
    "skipped_in_fixture": ("import pytest\n"
                           "@pytest.fixture\n"
                           "def f(): pytest.skip('no tool')\n"
                           "def test_a(f): pass\n", 77),
    "some_passed": ("import pytest\n"
                    "def test_a(): pass\n"
                    "@pytest.mark.skip(reason='r')\n"
                    "def test_b(): pass\n", 0),
    "xfail_only": ("import pytest\n"
                   "@pytest.mark.xfail(reason='known')\n"
                   "def test_a(): assert False\n", 0),
    "failed_and_skipped": ("import pytest\n"
                           "def test_a(): assert False\n"
                           "@pytest.mark.skip(reason='r')\n"
                           "def test_b(): pass\n", 1),
    "no_tests": ("X = 1\n", 5),
    "error_in_setup": ("import pytest\n"
                       "@pytest.fixture\n"
                       "def f(): raise RuntimeError('boom')\n"
                       "def test_a(f): pass\n", 1),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_exit_code(tmp_path, name):
    source, expected = CASES[name]
    path = tmp_path / ("test_%s.py" % name)
    path.write_text(source)
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        "-p", "skipped_exit", str(path)], cwd=tmp_path, capture_output=True,
                       text=True, timeout=120,
                       env={"PYTHONPATH": str(SUPPORT), "PATH": "/usr/bin:/bin",
                            "PYTHONDONTWRITEBYTECODE": "1"})
    assert r.returncode == expected, r.stdout + r.stderr
