"""The C++ client (client/cpp) and its C ABI against a real conveyord.

The tools are the examples built by CMake: fetch_batches (C++ API) and
c_example (C header only, compiled as C). Both print one line per batch
(labels, sample indices) and write the image bytes to --out, so every check
here compares what they received with what the Python client receives for
the same (pipeline, seed, epoch, rank, world_size): byte for byte, over a
unix socket (shared memory, fd hand-over) and over TCP (data socket).
"""

import os
import re
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import conveyor
from conveyor_integration import (BUILD_DIR, SOURCE_DIR, daemon_config, read_epoch, scaled,
                                  wait_until)

TOOLS = {"cpp": BUILD_DIR / "client" / "cpp" / "fetch_batches",
         "c": BUILD_DIR / "client" / "cpp" / "c_example"}
LIBRARY = BUILD_DIR / "client" / "cpp" / "libconveyor_client.so"
TRANSPORT = {"unix": "shared_memory", "tcp": "data_socket"}


@pytest.fixture(autouse=True)
def _tools_built():
    missing = [str(p) for p in list(TOOLS.values()) + [LIBRARY] if not p.exists()]
    if missing:
        pytest.fail("not built: %s" % ", ".join(missing))


def _args(address, pipeline="train", batch_size=8, seed=0, epoch=0, rank=0, world_size=1,
          credits=4, extra=()):
    return ["--server", address, "--pipeline", pipeline, "--batch-size", str(batch_size),
            "--seed", str(seed), "--epoch", str(epoch), "--rank", str(rank),
            "--world-size", str(world_size), "--credits", str(credits), *extra]


class Run:
    """What a tool printed: transport, batches [(labels, indices)], the
    done line's fields, the image bytes of --out."""

    def __init__(self, proc, out_path):
        self.returncode = proc.returncode
        self.stdout = proc.stdout
        self.stderr = proc.stderr
        self.transport = None
        self.batches = []
        self.done = {}
        for line in proc.stdout.splitlines():
            words = line.split()
            fields = dict(w.split("=", 1) for w in words[1:] if "=" in w)
            if words and words[0] == "opened":
                self.transport = fields["transport"]
            elif words and words[0] == "batch":
                ints = lambda s: [int(v) for v in s.split(",")] if s else []  # noqa: E731
                self.batches.append((ints(fields["labels"]), ints(fields["indices"])))
            elif words and words[0] == "done":
                self.done = fields
        self.images = out_path.read_bytes() if out_path is not None and out_path.exists() else b""

    def labels(self):
        return np.array([v for b in self.batches for v in b[0]], np.int64)

    def indices(self):
        return np.array([v for b in self.batches for v in b[1]], np.int64)


def run_tool(kind, args, tmp_path=None, timeout=60):
    out = tmp_path / ("%s.bin" % kind) if tmp_path is not None else None
    cmd = [str(TOOLS[kind])] + list(args) + (["--out", str(out)] if out is not None else [])
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=scaled(timeout))
    # A crash (signal) is never an acceptable way to fail.
    assert proc.returncode >= 0, "%s died of signal %d:\n%s" % (kind, -proc.returncode, proc.stderr)
    return Run(proc, out)


@pytest.mark.parametrize("via", ["unix", "tcp"])
@pytest.mark.parametrize("kind", ["cpp", "c"])
def test_batches_equal_the_python_clients_byte_for_byte(daemon, tmp_path, kind, via):
    address = getattr(daemon, via)
    params = dict(pipeline="train", batch_size=8, seed=7, epoch=1, rank=1, world_size=2)
    want = read_epoch(address, **params)
    got = run_tool(kind, _args(address, **params), tmp_path)
    assert got.returncode == 0, got.stderr
    assert want.transport == TRANSPORT[via]
    assert got.transport == TRANSPORT[via]
    assert len(got.batches) == len(want.sizes) == want.batches_per_epoch
    np.testing.assert_array_equal(got.labels(), want.labels)
    np.testing.assert_array_equal(got.indices(), want.indices)
    assert len(got.images) == want.images.nbytes
    assert got.images == want.images.tobytes()
    print("%s over %s: %s batches/s" % (kind, via, got.done.get("batches_per_s")))


def test_inline_transport_over_tcp_equals_the_python_client(daemon, tmp_path):
    params = dict(pipeline="eval", batch_size=5, seed=3)
    want = read_epoch(daemon.tcp, transport="inline", **params)
    got = run_tool("cpp", _args(daemon.tcp, **params, extra=["--transport", "inline"]), tmp_path)
    assert got.returncode == 0, got.stderr
    assert got.transport == "inline"
    np.testing.assert_array_equal(got.indices(), want.indices)
    assert got.images == want.images.tobytes()


def test_resume_state_continues_where_the_first_stream_stopped(daemon, tmp_path):
    params = dict(batch_size=8, seed=5, epoch=0)
    want = read_epoch(daemon.unix, **params)
    first = run_tool("cpp", _args(daemon.unix, **params, extra=["--batches", "2"]), tmp_path)
    assert first.returncode == 0, first.stderr
    assert (first.done["resume_epoch"], first.done["resume_offset"]) == ("0", "16")
    (tmp_path / "cpp.bin").rename(tmp_path / "first.bin")
    rest = run_tool("cpp", _args(daemon.unix, **params, extra=[
        "--resume-epoch", first.done["resume_epoch"],
        "--resume-offset", first.done["resume_offset"]]), tmp_path)
    assert rest.returncode == 0, rest.stderr
    assert rest.done["resume_epoch"] == "1" and rest.done["resume_offset"] == "0"
    np.testing.assert_array_equal(np.concatenate([first.indices(), rest.indices()]), want.indices)
    assert (tmp_path / "first.bin").read_bytes() + rest.images == want.images.tobytes()


def test_releases_return_credits_over_several_epochs(daemon, tmp_path):
    # 3 epochs of 6 batches with 2 credits, holding one batch besides the
    # newest: the stream can only finish if every release reaches the
    # daemon (a refused or stale one would end it with INVALID_ARGUMENT).
    for via in ("unix", "tcp"):
        got = run_tool("cpp", _args(getattr(daemon, via), credits=2,
                                    extra=["--epochs", "3", "--hold", "1", "--quiet"]))
        assert got.returncode == 0, got.stderr
        assert got.done["batches"] == "18", got.stdout


def test_holding_all_credits_is_a_clear_error_not_a_hang(daemon):
    got = run_tool("cpp", _args(daemon.unix, credits=2, extra=["--hold", "2"]))
    assert got.returncode == 1, got.stdout
    assert "FAILED_PRECONDITION" in got.stderr and "holding all 2 credits" in got.stderr, got.stderr
    assert len(got.batches) == 2


def _stream_stats(d):
    streams = conveyor.stats(d.unix).streams
    assert len(streams) == 1, streams
    return streams[0]


def _wait_line(proc, word, timeout):
    """The first line of proc's stdout that starts with `word`; the process is
    killed (and the test fails) if none comes within `timeout` s (scaled)."""
    watchdog = threading.Timer(scaled(timeout), proc.kill)
    watchdog.start()
    try:
        for line in proc.stdout:
            if line.startswith(word):
                return line
    finally:
        watchdog.cancel()
    proc.kill()
    raise AssertionError("no %r line from the tool: %s" % (word, proc.stderr.read()))


@pytest.mark.parametrize("via", ["unix", "tcp"])
def test_daemon_sends_no_more_than_the_credits_and_resumes_on_release(daemon_factory, dataset,
                                                                       via):
    root, _ = dataset
    d = daemon_factory(daemon_config(root), name="credits")
    proc = subprocess.Popen([str(TOOLS["cpp"])] + _args(getattr(d, via), credits=3, extra=[
        "--hold", "3", "--pause-after", "3", "--batches", "3"]) + [],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert _wait_line(proc, "paused", 30).strip() == "paused held=3"
        st = _stream_stats(d)
        assert st.slots_held_by_client == 3
        # Nothing more can come while the client holds every credit.
        time.sleep(0.5)
        st = _stream_stats(d)
        assert st.batches_emitted == 3 and st.slots_held_by_client == 3, st
        proc.stdin.write("\n")
        proc.stdin.flush()
        proc.wait(timeout=scaled(30))
        assert proc.returncode == 0, proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert wait_until(d.idle, 10), conveyor.stats(d.unix)


@pytest.mark.parametrize("via", ["unix", "tcp"])
def test_killed_client_frees_its_slots(daemon_factory, dataset, via):
    root, _ = dataset
    d = daemon_factory(daemon_config(root), name="killed")
    proc = subprocess.Popen([str(TOOLS["cpp"])] + _args(getattr(d, via), credits=2, extra=[
        "--epochs", "0", "--hold", "1", "--pause-after", "2"]),
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_line(proc, "paused", 30)
        st = conveyor.stats(d.unix)
        assert st.streams_open == 1 and st.slot_bytes_in_use > 0, st
        if via == "unix":
            assert d.memfd_mappings(), "the daemon maps no stream memfd"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=scaled(10))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert wait_until(d.idle, 10), conveyor.stats(d.unix)
    assert wait_until(lambda: d.memfd_mappings() == [], 10), d.memfd_mappings()


@pytest.mark.parametrize("kind", ["cpp", "c"])
def test_unknown_pipeline_is_a_clear_error(daemon, kind):
    got = run_tool(kind, _args(daemon.unix, pipeline="no-such-pipeline"))
    assert got.returncode == 1
    assert "NOT_FOUND" in got.stderr and "no-such-pipeline" in got.stderr, got.stderr


@pytest.mark.parametrize("kind", ["cpp", "c"])
def test_bad_field_is_the_daemons_invalid_argument(daemon, kind):
    got = run_tool(kind, _args(daemon.unix, batch_size=100000))
    assert got.returncode == 1
    assert "INVALID_ARGUMENT" in got.stderr and "batch_size" in got.stderr, got.stderr


@pytest.mark.parametrize("kind", ["cpp", "c"])
@pytest.mark.parametrize("address", ["unix:///nonexistent-conveyor/x.sock", "127.0.0.1:1"])
def test_bad_address_is_unavailable(kind, address):
    got = run_tool(kind, _args(address))
    assert got.returncode == 1
    assert "UNAVAILABLE" in got.stderr, got.stderr


def test_shared_library_exports_only_the_c_abi():
    out = subprocess.run(["nm", "-D", "--defined-only", str(LIBRARY)], capture_output=True,
                         text=True, check=True).stdout
    names = [line.split()[-1] for line in out.splitlines() if line.strip()]
    assert "conveyor_stream_next" in names
    assert [n for n in names if not n.startswith("conveyor_")] == []


HEADER = SOURCE_DIR / "client" / "cpp" / "include" / "conveyor_client.h"


def abi_version():
    return re.search(r"#define CONVEYOR_CLIENT_ABI_VERSION (\d+)", HEADER.read_text()).group(1)


def project_version():
    text = (SOURCE_DIR / "CMakeLists.txt").read_text()
    return re.search(r"project\(conveyor VERSION ([0-9.]+)", text).group(1)


def test_shared_library_carries_its_abi_version():
    # The soname names CONVEYOR_CLIENT_ABI_VERSION of the header; the file
    # is libconveyor_client.so.ABI.PROJECT_VERSION; the GPU functions of
    # version 2, conveyor_version of version 3 and the sample-field
    # functions added to version 3 are exported.
    version = abi_version()
    dynamic = subprocess.run(["readelf", "-d", str(LIBRARY)], capture_output=True, text=True,
                             check=True).stdout
    assert "Library soname: [libconveyor_client.so.%s]" % version in dynamic, dynamic
    real = LIBRARY.resolve()
    assert real.name == "libconveyor_client.so.%s.%s" % (version, project_version()), real
    assert (LIBRARY.parent / ("libconveyor_client.so.%s" % version)).resolve() == real
    out = subprocess.run(["nm", "-D", "--defined-only", str(LIBRARY)], capture_output=True,
                         text=True, check=True).stdout
    names = {line.split()[-1] for line in out.splitlines() if line.strip()}
    assert {"conveyor_abi_version", "conveyor_version", "conveyor_batch_device_pointer",
            "conveyor_batch_copy_images", "conveyor_batch_field_count",
            "conveyor_batch_field_info", "conveyor_batch_find_field",
            "conveyor_batch_field_offsets", "conveyor_batch_field_data",
            "conveyor_batch_field_present"} <= names


def test_every_function_of_the_header_is_exported():
    # A function declared in conveyor_client.h but missing from the library
    # (not compiled in, hidden, or kept local by exports.map) would only
    # show when a program calling it fails to load.
    declared = set(re.findall(r"CONVEYOR_API\s[^;(]*?\b(conveyor_\w+)\s*\(", HEADER.read_text()))
    assert len(declared) >= 20 and "conveyor_batch_field_data" in declared, declared
    out = subprocess.run(["nm", "-D", "--defined-only", str(LIBRARY)], capture_output=True,
                         text=True, check=True).stdout
    names = {line.split()[-1] for line in out.splitlines() if line.strip()}
    assert declared - names == set()
    assert names - declared == set(), "exported but not in the header"


@pytest.mark.parametrize("kind", ["cpp", "c"])
@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_help_prints_the_usage_and_exits_0(kind, flag):
    proc = subprocess.run([str(TOOLS[kind]), flag], capture_output=True, text=True,
                          timeout=scaled(30))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: %s --server ADDRESS" % TOOLS[kind].name), proc.stdout
    for option in ("--pipeline", "--batch-size", "--transport", "--out", "--help"):
        assert option in proc.stdout, option
    assert proc.stderr == ""
    # A real usage error still exits 2, on stderr.
    bad = subprocess.run([str(TOOLS[kind]), "--no-such-flag", "1"], capture_output=True,
                         text=True, timeout=scaled(30))
    assert bad.returncode == 2 and "usage:" in bad.stderr, (bad.returncode, bad.stderr)


def test_c_example_reports_the_library_version():
    proc = subprocess.run([str(TOOLS["c"]), "--version"], capture_output=True, text=True,
                          timeout=scaled(30))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "c_example: libconveyor_client %s, ABI version %s (header %s)" % (
        project_version(), abi_version(), abi_version()), proc.stdout


# --- the installed package ---------------------------------------------------------
COMPONENT = "conveyor-client"


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """`cmake --install` of the component into a temporary prefix."""
    prefix = tmp_path_factory.mktemp("prefix")
    r = subprocess.run(["cmake", "--install", str(BUILD_DIR), "--prefix", str(prefix),
                        "--component", COMPONENT], capture_output=True, text=True,
                       timeout=scaled(120))
    assert r.returncode == 0, r.stdout + r.stderr
    return prefix


def _one(prefix, pattern):
    found = sorted(prefix.glob(pattern))
    assert len(found) == 1, (pattern, found, sorted(str(p) for p in prefix.rglob("*")))
    return found[0]


def test_install_holds_the_library_headers_and_package_files(installed):
    version = abi_version()
    lib = _one(installed, "lib*/libconveyor_client.so")
    assert lib.is_symlink() and lib.resolve().name == "libconveyor_client.so.%s.%s" % (
        version, project_version())
    assert (lib.parent / ("libconveyor_client.so.%s" % version)).resolve() == lib.resolve()
    for header in ("conveyor_client.h", "conveyor_client.hpp"):
        assert _one(installed, "include/" + header).read_text() == (HEADER.parent / header).read_text()
    _one(installed, "lib*/pkgconfig/conveyor-client.pc")
    _one(installed, "lib*/cmake/ConveyorClient/ConveyorClientConfig.cmake")
    _one(installed, "lib*/cmake/ConveyorClient/ConveyorClientConfigVersion.cmake")
    # The component is the client's only: no daemon, no Python package.
    assert not list(installed.rglob("conveyord")) and not list(installed.rglob("*.py"))


def _sanitizer_flags():
    """The flags of the sanitizer the library was built with (the asan stage
    of scripts/test.sh): a program linking it must be built with them too,
    or the sanitizer's runtime does not come first and it refuses to run."""
    data = LIBRARY.resolve().read_bytes()
    if b"__asan_init" in data:
        return ["-fsanitize=address,undefined", "-fno-sanitize=vptr"]
    if b"__tsan_init" in data:
        return ["-fsanitize=thread"]
    return []


def _pkg_config(installed, *args):
    pc = _one(installed, "lib*/pkgconfig/conveyor-client.pc")
    env = dict(os.environ, PKG_CONFIG_PATH=str(pc.parent))
    r = subprocess.run(["pkg-config", *args, "conveyor-client"], capture_output=True, text=True,
                       env=env, timeout=scaled(30))
    assert r.returncode == 0, r.stderr
    return r.stdout.split()


def _compile_c(installed, source, out):
    flags = _pkg_config(installed, "--cflags", "--libs")
    libdir = _pkg_config(installed, "--variable=libdir")[0]
    r = subprocess.run(["cc", "-std=c11", "-Wall", "-Werror", *_sanitizer_flags(), str(source),
                        "-o", str(out), *flags, "-Wl,-rpath," + libdir], capture_output=True, text=True,
                       timeout=scaled(120))
    assert r.returncode == 0, r.stderr
    return out


def _same_as_the_built_c_example(daemon, exe, tmp_path):
    params = dict(pipeline="train", batch_size=8, seed=3, epoch=0, rank=0, world_size=1)
    want = run_tool("c", _args(daemon.unix, **params))
    proc = subprocess.run([str(exe)] + _args(daemon.unix, **params), capture_output=True,
                          text=True, timeout=scaled(60))
    assert proc.returncode == 0, proc.stderr
    got = Run(proc, None)
    assert want.returncode == 0 and len(got.batches) == len(want.batches) > 0
    np.testing.assert_array_equal(got.indices(), want.indices())
    np.testing.assert_array_equal(got.labels(), want.labels())


def test_pkg_config_builds_c_example_against_the_install(installed, daemon, tmp_path):
    pc_version = _pkg_config(installed, "--modversion")[0]
    assert pc_version == project_version()
    assert _pkg_config(installed, "--variable=abi_version")[0] == abi_version()
    exe = _compile_c(installed, SOURCE_DIR / "client" / "cpp" / "examples" / "c_example.c",
                     tmp_path / "c_example")
    # It runs on the installed library, not the build tree's.
    ldd = subprocess.run(["ldd", str(exe)], capture_output=True, text=True, check=True).stdout
    assert str(installed) in ldd and str(BUILD_DIR) not in ldd, ldd
    _same_as_the_built_c_example(daemon, exe, tmp_path)


def test_find_package_builds_c_and_cpp_clients_against_the_install(installed, daemon, tmp_path):
    project = tmp_path / "consumer"
    project.mkdir()
    (project / "CMakeLists.txt").write_text(f"""
cmake_minimum_required(VERSION 3.16)
project(consumer C CXX)
find_package(ConveyorClient {project_version()} REQUIRED)
if(NOT ConveyorClient_ABI_VERSION EQUAL {abi_version()})
  message(FATAL_ERROR "ConveyorClient_ABI_VERSION is ${{ConveyorClient_ABI_VERSION}}")
endif()
add_executable(c_example {SOURCE_DIR}/client/cpp/examples/c_example.c)
target_link_libraries(c_example PRIVATE ConveyorClient::conveyor_client)
set_target_properties(c_example PROPERTIES C_STANDARD 11)
add_executable(cpp_client_hpp {SOURCE_DIR}/tests/integration/cpp_client_hpp.cc)
target_link_libraries(cpp_client_hpp PRIVATE ConveyorClient::conveyor_client)
set_target_properties(cpp_client_hpp PROPERTIES CXX_STANDARD 17 CXX_STANDARD_REQUIRED ON)
""")
    build = tmp_path / "consumer-build"
    sanitize = " ".join(_sanitizer_flags())
    for cmd in (["cmake", "-S", str(project), "-B", str(build), "-DCMAKE_BUILD_TYPE=Release",
                 "-DCMAKE_PREFIX_PATH=" + str(installed), "-DCMAKE_C_FLAGS=" + sanitize,
                 "-DCMAKE_CXX_FLAGS=" + sanitize, "-DCMAKE_EXE_LINKER_FLAGS=" + sanitize],
                ["cmake", "--build", str(build), "-j", "2"]):
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=scaled(300))
        assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    _same_as_the_built_c_example(daemon, build / "c_example", tmp_path)
    # The C++ header over the C ABI reads the same epoch as the Python client.
    want = read_epoch(daemon.unix, pipeline="train", batch_size=8, seed=11)
    proc = subprocess.run([str(build / "cpp_client_hpp"), daemon.unix, "train", "8", "11"],
                          capture_output=True, text=True, timeout=scaled(60))
    assert proc.returncode == 0, proc.stderr
    fields = dict(w.split("=", 1) for w in proc.stdout.split()[1:])
    assert int(fields["batches"]) == want.batches_per_epoch
    np.testing.assert_array_equal(np.array([int(v) for v in fields["indices"].split(",")]),
                                  want.indices)
    bad = subprocess.run([str(build / "cpp_client_hpp"), daemon.unix, "no-such", "8", "0"],
                         capture_output=True, text=True, timeout=scaled(60))
    assert bad.returncode == 1 and "NOT_FOUND" in bad.stderr, bad.stderr


def test_struct_sizes_are_checked(installed, daemon, tmp_path):
    """A caller built from another header: too small is INVALID_ARGUMENT
    (nothing written, no batch lost), larger works when its unknown fields
    are zero and is refused when one is set (tests/integration/
    cpp_client_struct_sizes.c)."""
    source = Path(__file__).with_name("cpp_client_struct_sizes.c")
    checks = re.findall(r"^\s+check\(", source.read_text(), re.M)
    exe = _compile_c(installed, source, tmp_path / "struct_sizes")
    proc = subprocess.run([str(exe), daemon.unix, "train", "8"], capture_output=True, text=True,
                          timeout=scaled(60))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    passed = [line.split()[1] for line in proc.stdout.splitlines() if line.startswith("ok ")]
    assert len(passed) == len(checks) >= 10 and "FAILED" not in proc.stdout, proc.stdout
