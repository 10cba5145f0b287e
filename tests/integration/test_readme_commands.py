"""The shell commands of the project's READMEs run as written.

Every fenced code block tagged sh/bash/shell/console in DOCS is one case:

- A block preceded (on the line before its fence, or the line before that
  when it is blank) by `<!-- not run by tests: REASON -->` is not run: its
  case is skipped with REASON, and test_list_not_run prints them all.
- Every block, run or not, is checked: every program of ours it names must
  exist and answer `--help` with exit code 0, and every `--flag` it passes
  must appear in that help (so a renamed flag or an aborting `--help` fails
  even where the block cannot run here).
- Every other block runs in bash with `set -eo pipefail`, from the source
  tree, with a clean environment (no PYTHONPATH, no CONVEYOR_* variables)
  whose PATH starts with a folder holding `conveyor` and `conveyord` as
  `cmake --install` puts them on PATH. A block that fails (or runs longer than
  its deadline) fails its case with its output.

The documented commands use `build/` as the build folder (scripts/build.sh's
default); the run cases need that to be the build under test, and skip
otherwise (the sanitizer stages build into other folders). `demo-data/` is
what command (1) of README.md makes; when it is missing, a small one is
generated with the same tool first (scripts/demo.sh regenerates a full one:
it looks for its own completion marker).
"""

import functools
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

import conveyor_integration as ci

DOCS = ["README.md", "config/README.md", "client/python/README.md", "bench/README.md"]
SHELL_LANGS = {"sh", "bash", "shell", "console"}
NOT_RUN = re.compile(r"^\s*<!--\s*not run by tests:\s*(?P<reason>.+?)\s*-->\s*$")
FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})\s*(?P<lang>[\w+-]*)")
BLOCK_TIMEOUT = 240  # seconds per block, before scaling


@dataclass
class Block:
    doc: str
    line: int  # 1-based line of the opening fence
    lang: str
    text: str
    not_run: str  # the marker's reason, or "" when the block runs

    @property
    def id(self):
        return "%s:%d" % (self.doc, self.line)


def parse_blocks(doc, text):
    """The fenced code blocks of a markdown text, in order."""
    blocks, lines, i = [], text.splitlines(), 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence, start = m.group("fence"), i
        j = i + 1
        while j < len(lines) and not lines[j].strip().startswith(fence):
            j += 1
        reason = ""
        for k in (start - 1, start - 2):
            if k < 0:
                break
            nr = NOT_RUN.match(lines[k])
            if nr:
                reason = nr.group("reason")
                break
            if lines[k].strip():
                break
        blocks.append(Block(doc, start + 1, m.group("lang").lower(),
                            "\n".join(lines[start + 1:j]) + "\n", reason))
        i = j + 1
    return blocks


def shell_blocks():
    out = []
    for doc in DOCS:
        out += [b for b in parse_blocks(doc, (ci.SOURCE_DIR / doc).read_text())
                if b.lang in SHELL_LANGS]
    return out


BLOCKS = shell_blocks()
RUN_BLOCKS = [b for b in BLOCKS if not b.not_run]
NOT_RUN_BLOCKS = [b for b in BLOCKS if b.not_run]


# --- commands of a block -----------------------------------------------------
def commands(text):
    """The simple commands of a shell block, each a list of words: lines
    joined at trailing backslashes, comments dropped, split at ; && || |."""
    joined = re.sub(r"\\\n", " ", text)
    # A synopsis goes on, without a backslash, on lines indented to its options.
    joined = re.sub(r"\n[ \t]+(?=\[?--)", " ", joined)
    cmds = []
    for line in joined.splitlines():
        lex = shlex.shlex(line, posix=True, punctuation_chars=True)
        lex.whitespace_split = True
        lex.commenters = "#"
        current = []
        for tok in lex:
            if tok in (";", "&&", "||", "|", "&"):
                if current:
                    cmds.append(current)
                current = []
            else:
                current.append(tok)
        if current:
            cmds.append(current)
    return cmds


def program_of(words):
    """(help argv, flags passed) for a command of ours, or None for an
    external tool (cmake, ctest, apt-get, ...), a shell builtin or a
    variable assignment."""
    words = list(words)
    while words and (re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[0]) or words[0] in ("sudo", "time")):
        words.pop(0)
    if not words or words[0] in ("export", "cd", "set", "echo", "source", "."):
        return None
    prog, args = words[0], words[1:]
    flags = sorted({m.group(1) for m in (re.match(r"^\[?(--[a-z][a-z0-9-]*)", a) for a in args)
                    if m})
    if prog in ("python3", "/usr/bin/python3"):
        if args[:2] == ["-m", "conveyor"]:
            return conveyor_help(args[2:]), flags
        if args and args[0].endswith(".py"):
            return [ci.PYTHON, str(ci.SOURCE_DIR / args[0]), "--help"], flags
        return None
    if prog == "conveyor" or prog.endswith("client/python/bin/conveyor"):
        return conveyor_help(args), flags
    if prog == "conveyord":
        return [str(ci.CONVEYORD), "--help"], flags
    path = prog[2:] if prog.startswith("./") else prog
    if path.startswith("build/"):
        return [str(ci.SOURCE_DIR / path), "--help"], flags
    if path.startswith("scripts/") or path.startswith("bench/"):
        return [str(ci.SOURCE_DIR / path)], []  # exists and is executable: checked below
    return None


def conveyor_help(args):
    sub = [a for a in args if not a.startswith("-")][:1]
    return [ci.PYTHON, str(ci.CLI)] + sub + ["--help"]


@functools.lru_cache(maxsize=None)
def run_help(argv):
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=ci.scaled(60),
                          env=ci.client_env(), cwd=ci.SOURCE_DIR, stdin=subprocess.DEVNULL)


def check_programs(block):
    """Every program of ours in the block exists and documents the flags the
    block passes it; returns the problems found."""
    problems = []
    for words in commands(block.text):
        found = program_of(words)
        if found is None:
            continue
        argv, flags = found
        if argv[-1] != "--help":
            p = Path(argv[0])
            if not (p.is_file() and os.access(p, os.X_OK)):
                problems.append("%s: not an executable file" % argv[0])
            continue
        target = Path(argv[1] if argv[0] == ci.PYTHON else argv[0])
        if not target.exists():
            problems.append("%s: no such file (from `%s`)" % (target, " ".join(words)))
            continue
        r = run_help(tuple(argv))
        help_text = r.stdout + r.stderr
        if r.returncode != 0:
            problems.append("`%s` exited %d:\n%s" % (" ".join(argv), r.returncode, help_text[-2000:]))
            continue
        for flag in flags:
            if not re.search(r"(?<![\w-])%s(?![\w-])" % re.escape(flag), help_text):
                problems.append("`%s`: %s is not in `%s`" % (" ".join(words), flag, " ".join(argv)))
    return problems


# --- the cases -----------------------------------------------------------------
def test_docs_have_shell_blocks():
    """The parser finds the blocks (a changed fence style must not make this
    test pass vacuously)."""
    per_doc = {doc: sum(1 for b in BLOCKS if b.doc == doc) for doc in DOCS}
    assert per_doc["README.md"] >= 3, per_doc
    assert per_doc["bench/README.md"] >= 5, per_doc
    assert RUN_BLOCKS, "every block is marked not run"


def test_recursive_commands_are_recognised():
    for text in ("./scripts/test.sh\n", "CONVEYOR_TEST_STAGES=asan ./scripts/test.sh\n",
                 "ctest --test-dir build\n", "./scripts/demo.sh\n", ".ci/run\n"):
        progs = [next(w for w in words if "=" not in w) for words in commands(text)]
        assert any(RECURSIVE.search(p) for p in progs), text


def test_parser_reads_markers_and_fences():
    text = ("x\n<!-- not run by tests: needs a GPU host -->\n```sh\nnvidia-smi\n```\n\n"
            "```bash\necho a \\\n  b  # c\ntrue && false\n```\n"
            "<!-- not run by tests: far away -->\n\ntext\n```sh\nls\n```\n")
    blocks = parse_blocks("t.md", text)
    assert [(b.line, b.lang, b.not_run) for b in blocks] == [
        (3, "sh", "needs a GPU host"), (7, "bash", ""), (15, "sh", "")]
    assert commands(blocks[1].text) == [["echo", "a", "b"], ["true"], ["false"]]


def require_documented_build():
    ci.require_daemon()
    if (ci.SOURCE_DIR / "build").resolve() != ci.BUILD_DIR.resolve():
        pytest.skip("the documented commands use build/; this run tests %s" % ci.BUILD_DIR)


@pytest.fixture(scope="module")
def run_env(tmp_path_factory):
    require_documented_build()
    demo = ci.SOURCE_DIR / "demo-data" / "train"
    if not demo.is_dir():
        subprocess.run([ci.PYTHON, "bench/gen_imagenet_like.py", "--out", str(demo),
                        "--images", "20", "--classes", "2", "--seed", "0"],
                       check=True, cwd=ci.SOURCE_DIR, capture_output=True,
                       timeout=ci.scaled(120))
    bindir = tmp_path_factory.mktemp("bin")
    (bindir / "conveyor").symlink_to(ci.CLI)
    (bindir / "conveyord").symlink_to(ci.CONVEYORD)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("CONVEYOR_") and k not in ("PYTHONPATH", "RANK", "WORLD_SIZE",
                                                          "LOCAL_RANK")}
    env["PATH"] = "%s:%s" % (bindir, env.get("PATH", "/usr/bin:/bin"))
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


# Commands that run the test suite (this test among it) or the whole demo:
# a block with one of them must carry the marker, never run from here.
RECURSIVE = re.compile(r"(^|/)(test\.sh|demo\.sh|run)$|^ctest$")


@pytest.mark.parametrize("block", RUN_BLOCKS, ids=lambda b: b.id)
def test_block_runs(block, run_env):
    for words in commands(block.text):
        prog = next((w for w in words if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", w)), "")
        if RECURSIVE.search(prog):
            pytest.fail("%s runs `%s`: mark it <!-- not run by tests: ... -->" % (block.id, prog),
                        pytrace=False)
    try:
        r = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", block.text], cwd=ci.SOURCE_DIR,
                           env=run_env, capture_output=True, text=True,
                           timeout=ci.scaled(BLOCK_TIMEOUT), stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as e:
        pytest.fail("%s: still running after %.0f s:\n%s\n--- output:\n%s" % (
            block.id, e.timeout, block.text, (e.stdout or b"")[-3000:]), pytrace=False)
    if r.returncode != 0:
        pytest.fail("%s: exit code %d:\n%s\n--- stdout:\n%s\n--- stderr:\n%s" % (
            block.id, r.returncode, block.text, r.stdout[-3000:], r.stderr[-3000:]),
            pytrace=False)


@pytest.mark.parametrize("block", BLOCKS, ids=lambda b: b.id)
def test_block_names_real_programs_and_flags(block):
    require_documented_build()
    problems = check_programs(block)
    assert not problems, "%s:\n%s" % (block.id, "\n".join(problems))


def test_list_not_run(capsys):
    """Prints which blocks are not run and why (shown in the test's output)."""
    assert all(b.not_run.strip() for b in NOT_RUN_BLOCKS)
    with capsys.disabled():
        sys.stdout.write("\nREADME blocks not run by tests (%d of %d):\n" % (
            len(NOT_RUN_BLOCKS), len(BLOCKS)))
        for b in NOT_RUN_BLOCKS:
            sys.stdout.write("  %-28s %s\n" % (b.id, b.not_run))


def test_fetch_help_describes_the_tcp_transport():
    """`conveyor fetch --help` says what AUTO picks over TCP: the data socket
    when the daemon has one (it once said inline, as before the data socket)."""
    r = run_help((ci.PYTHON, str(ci.CLI), "fetch", "--help"))
    assert r.returncode == 0, r.stderr
    text = " ".join(r.stdout.split())
    assert "inline on TCP" not in text, text
    assert re.search(r"on TCP the data socket.*else inline", text), text
