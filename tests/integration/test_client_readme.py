"""client/python/README.md's runnable snippets (each python block right
after a `<!-- runnable -->` line) run as written, each in a process of its
own, against a real daemon: $CONVEYOR_SERVER names it, and its `train`
pipeline has the 48 images the snippets expect."""

import re
import subprocess

import pytest

from conveyor_integration import CLIENT_DIR, PYTHON, client_env, scaled

README = CLIENT_DIR / "README.md"
_SNIPPET = re.compile(r"^<!-- runnable -->\n```python\n(.*?)^```$", re.S | re.M)


def snippets():
    found = _SNIPPET.findall(README.read_text())
    assert len(found) >= 5, "README.md lost its runnable snippets (%d found)" % len(found)
    return found


@pytest.mark.parametrize("index", range(len(snippets())))
def test_readme_snippet_runs(daemon, tmp_path, index):
    code = snippets()[index]
    env = client_env()
    env["CONVEYOR_SERVER"] = daemon.unix
    r = subprocess.run([PYTHON, "-c", code], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=scaled(180))
    assert r.returncode == 0, "snippet %d failed:\n%s\n%s" % (index, code, r.stderr[-4000:])
    print(r.stdout)
