"""deploy/Dockerfile installs exactly what its images need (offline: no
container is built here).

- daemon stage: its apt packages are exactly the Debian packages of the
  built conveyord's DT_NEEDED libraries (objdump -p; each library located by
  ldd and mapped to its package through dpkg's file lists, as dpkg -S
  does), less libc6, which every Debian image has.
- build stage: its apt packages are exactly the build tools plus the -dev
  package of each of those libraries (the package owning the library's
  unversioned .so link), less libc6-dev (build-essential brings it): no
  Python, torch, test or benchmark packages.
- trainer stage: python3 plus exactly the Debian packages of the modules
  that importing the client package (conveyor, its CLI, its daemon launcher)
  loads.
- Both images carry the OCI labels.

Needs Debian's dpkg and binutils, as on the development machine and CI.
The daemon's list is judged from the conveyord under test, so an optional
library found at build time (e.g. one a new feature links when present)
must be added here as well.
"""

import functools
import os
import re
import subprocess
from pathlib import Path

import pytest

import conveyor_integration as ci

DOCKERFILE = ci.SOURCE_DIR / "deploy" / "Dockerfile"
BUILD_TOOLS = {"build-essential", "cmake", "ninja-build", "pkg-config", "protobuf-compiler",
               "protobuf-compiler-grpc"}
OCI_LABELS = ("title", "description", "version", "revision")


def stages(text):
    """{stage name: [instruction lines, continuations joined]} of a Dockerfile."""
    joined = re.sub(r"\\\n", " ", text)
    out, current = {}, None
    for line in joined.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = re.match(r"FROM\s+\S+(?:\s+AS\s+(\S+))?", line, re.I)
        if m:
            current = m.group(1) or "stage%d" % len(out)
            out[current] = []
        elif current:
            out[current].append(line)
    return out


def apt_packages(instructions):
    pkgs = []
    for line in instructions:
        for m in re.finditer(r"apt-get install((?:\s+(?!&&)\S+)+)", line):
            pkgs += [w for w in m.group(1).split() if not w.startswith("-")]
    return pkgs


def labels(instructions):
    found = {}
    for line in instructions:
        if line.upper().startswith("LABEL "):
            for k, v in re.findall(r'(\S+?)="([^"]*)"', line[6:]):
                found[k] = v
    return found


@functools.lru_cache(maxsize=1)
def dpkg_files():
    """{installed path: Debian package}, read once from dpkg's file lists
    (what `dpkg -S` searches; one call per path was a second each here)."""
    index = {}
    for lst in Path("/var/lib/dpkg/info").glob("*.list"):
        pkg = lst.stem.split(":", 1)[0]
        for line in lst.read_text(errors="replace").splitlines():
            index.setdefault(line, pkg)
    assert index, "no dpkg file lists in /var/lib/dpkg/info"
    return index


def dpkg_owner(path, follow=True):
    """The Debian package owning path (trying the merged-/usr aliases, and
    with follow the path with its links resolved), or None."""
    candidates = [str(path)] + ([os.path.realpath(path)] if follow else [])
    for c in list(candidates):
        if c.startswith("/usr/lib/"):
            candidates.append(c[4:])
        elif c.startswith("/lib"):
            candidates.append("/usr" + c)
    index = dpkg_files()
    return next((index[c] for c in candidates if c in index), None)


@pytest.fixture(scope="module")
def linked():
    """[(soname, resolved path)] of conveyord's DT_NEEDED entries."""
    ci.require_daemon()
    if ci.daemon_sanitizer():
        pytest.skip("conveyord is built with the %s sanitizer; the image builds Release"
                    % ci.daemon_sanitizer())
    objdump = subprocess.run(["objdump", "-p", str(ci.CONVEYORD)], capture_output=True,
                             text=True, check=True).stdout
    needed = re.findall(r"^\s*NEEDED\s+(\S+)", objdump, re.M)
    assert needed, objdump[:2000]
    ldd = subprocess.run(["ldd", str(ci.CONVEYORD)], capture_output=True, text=True,
                         check=True).stdout
    where = dict(re.findall(r"^\s*(\S+) => (\S+)", ldd, re.M))
    where.update({Path(p).name: p for p in re.findall(r"^\s*(/\S+) \(", ldd, re.M)})
    missing = [n for n in needed if n not in where]
    assert not missing, "ldd does not resolve %s:\n%s" % (missing, ldd)
    return [(n, where[n]) for n in needed]


@pytest.fixture(scope="module")
def dockerfile():
    return stages(DOCKERFILE.read_text())


def test_stages_present(dockerfile):
    assert {"build", "daemon", "trainer"} <= set(dockerfile), list(dockerfile)


def test_daemon_stage_installs_exactly_the_linked_libraries(linked, dockerfile):
    owners = {}
    for soname, path in linked:
        pkg = dpkg_owner(path)
        assert pkg, "no Debian package owns %s (%s)" % (path, soname)
        owners.setdefault(pkg, []).append(soname)
    want = set(owners) - {"libc6"}
    listed = apt_packages(dockerfile["daemon"])
    assert len(listed) == len(set(listed)), listed
    assert set(listed) == want, (
        "daemon stage lists %s; conveyord links %s\nmissing: %s\nnot linked: %s" % (
            sorted(listed), {p: owners[p] for p in sorted(owners)}, sorted(want - set(listed)),
            sorted(set(listed) - want)))


def test_build_stage_installs_tools_and_the_dev_packages_only(linked, dockerfile):
    dev = {}
    for soname, path in linked:
        link = Path(path).parent / (soname.split(".so")[0] + ".so")
        pkg = dpkg_owner(link, follow=False)
        if pkg is None:  # the C++ runtime: its link lives in gcc's folder (build-essential)
            assert soname.startswith(("libstdc++", "libgcc_s", "ld-linux")), soname
            continue
        dev.setdefault(pkg, []).append(soname)
    want = (set(dev) - {"libc6-dev"}) | BUILD_TOOLS
    listed = apt_packages(dockerfile["build"])
    assert set(listed) == want, (
        "build stage lists %s\nmissing: %s\nnot needed: %s" % (
            sorted(listed), sorted(want - set(listed)), sorted(set(listed) - want)))
    text = " ".join(dockerfile["build"])
    assert "install-deps.sh" not in text  # the project's full list brings torch and test tools
    assert "CONVEYOR_BUILD_TESTS=OFF" in text and "CONVEYOR_BUILD_BENCH=OFF" in text


def test_trainer_stage_installs_what_the_client_imports(dockerfile):
    code = ("import sys\nbefore = set(sys.modules)\n"
            "import conveyor, conveyor.cli, conveyor.daemon\n"
            "for n in sorted(set(sys.modules) - before):\n"
            "    f = getattr(sys.modules[n], '__file__', None)\n"
            "    if f: print(f)\n")
    r = subprocess.run([ci.PYTHON, "-c", code], capture_output=True, text=True,
                       env=ci.client_env(), timeout=ci.scaled(60), check=True)
    # The package itself: its source and its generated stubs (the build tree's).
    ours = (str(ci.CLIENT_DIR), str(ci.BUILD_DIR / "python"))
    files = [f for f in r.stdout.split("\n") if f and not f.startswith(ours)]
    std = subprocess.run([ci.PYTHON, "-c", "import sysconfig; print(sysconfig.get_paths()['stdlib'])"],
                         capture_output=True, text=True, check=True).stdout.strip()
    third_party = {f for f in files if not f.startswith(std + "/")}
    owners = {}
    for f in third_party:
        pkg = dpkg_owner(f)
        assert pkg, "the client imports %s, which no Debian package owns" % f
        owners.setdefault(pkg, f)
    listed = apt_packages(dockerfile["trainer"])
    assert set(listed) == set(owners) | {"python3"}, (sorted(listed), owners)


@pytest.mark.parametrize("stage", ["daemon", "trainer"])
def test_images_carry_oci_labels(dockerfile, stage):
    found = labels(dockerfile[stage])
    for key in OCI_LABELS:
        assert found.get("org.opencontainers.image." + key), (stage, key, found)
    assert found["org.opencontainers.image.version"] == "${VERSION}"
    assert any(line.startswith("ARG VERSION") for line in dockerfile[stage])


def test_copied_sources_exist(dockerfile):
    for name, instructions in dockerfile.items():
        for line in instructions:
            m = re.match(r"COPY\s+(?!--from)(\S+)\s+\S+$", line)
            if m and m.group(1) != ".":
                assert (ci.SOURCE_DIR / m.group(1)).exists(), (name, line)


def test_version_default_is_the_projects():
    project = re.search(r"project\(conveyor VERSION (\S+)", (ci.SOURCE_DIR / "CMakeLists.txt").read_text())
    arg = re.search(r"^ARG VERSION=(\S+)", DOCKERFILE.read_text(), re.M)
    assert project and arg and arg.group(1) == project.group(1), (project, arg)
