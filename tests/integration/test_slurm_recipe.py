"""deploy/slurm/conveyor-pool.sbatch, offline (no Slurm here): the script
parses (`bash -n`); the two conveyord configs it writes (the GPU nodes'
daemons, the CPU pool's) pass `conveyord --check-config --no-data`, and
`--check-config` with their dataset and token file present; they define
the same pipelines (the client refuses a daemon whose fingerprint differs),
and the pool listens on TCP off loopback with a token. The servers list it
makes of component 1's node list (a stub `scontrol` on PATH stands for
Slurm's) is what the pooled Loader parses: one daemon per host, after the
node's own."""

import os
import stat
import subprocess
from pathlib import Path

import yaml

import conveyor_integration as ci
from conveyor._pool_servers import ServerSet

SCRIPT = ci.SOURCE_DIR / "deploy" / "slurm" / "conveyor-pool.sbatch"
NODELIST = "cpu-[01-02],cpu-10"
HOSTS = ["cpu-01", "cpu-02", "cpu-10"]


def script_env(tmp_path, **extra):
    env = dict(os.environ, CONVEYOR_DATA=str(tmp_path / "data"), CONVEYOR_RUN=str(tmp_path / "run"),
               CONVEYOR_SOCKET=str(tmp_path / "s" / "conveyor.sock"), SLURM_JOB_ID="42")
    env.update(extra)
    return env


def call(function, tmp_path, *args, **extra):
    """Runs one function of the script (sourced: its main() does not run)."""
    r = subprocess.run(["bash", "-c", 's=$1; shift; source "$s" && "$@"', "test", str(SCRIPT),
                        function] + list(args),
                       capture_output=True, text=True, env=script_env(tmp_path, **extra),
                       timeout=ci.scaled(30))
    assert r.returncode == 0, (function, r.stdout, r.stderr)
    return r.stdout


def test_script_parses_and_is_a_heterogeneous_job():
    r = subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    lines = SCRIPT.read_text().splitlines()
    directives = [line for line in lines if line.startswith("#SBATCH")]
    assert directives.count("#SBATCH hetjob") == 1, directives
    gpu, cpu = "\n".join(directives).split("#SBATCH hetjob")
    assert "--gpus-per-node" in gpu and "--gpus" not in cpu
    assert "--het-group=1" in SCRIPT.read_text() and "--het-group=0" in SCRIPT.read_text()


def test_configs_pass_check_config_and_define_the_same_pipelines(tmp_path):
    ci.require_daemon()
    run = tmp_path / "run"
    call("write_configs", tmp_path, str(run))
    configs = {name: run / ("%s.yaml" % name) for name in ("local", "pool")}
    for name, path in configs.items():
        r = subprocess.run([str(ci.CONVEYORD), "--config", str(path), "--check-config",
                            "--no-data"], capture_output=True, text=True, timeout=ci.scaled(60))
        assert r.returncode == 0, (name, r.stdout, r.stderr)
    local, pool = (yaml.safe_load(configs[n].read_text()) for n in ("local", "pool"))
    assert local["pipelines"] == pool["pipelines"]
    assert local["access"] == pool["access"] and pool["access"]["tokens"]
    assert local["listen"]["unix"] == str(tmp_path / "s" / "conveyor.sock")
    assert "tcp" not in local["listen"]
    assert pool["listen"]["unix"] == ""
    assert pool["listen"]["tcp"] == "0.0.0.0:7070"
    assert pool["listen"]["data_tcp"] == "0.0.0.0:7071"
    # With the data and the token file main() makes: the full check.
    for p in pool["pipelines"].values():
        ci.make_image_folder(p["dataset"]["root"], classes=2, per_class=2)
    token = Path(pool["access"]["tokens"][0]["file"])
    token.write_text("0123456789abcdef0123456789abcdef\n")
    token.chmod(stat.S_IRUSR | stat.S_IWUSR)
    for name, path in configs.items():
        r = subprocess.run([str(ci.CONVEYORD), "--config", str(path), "--check-config"],
                           capture_output=True, text=True, timeout=ci.scaled(60))
        assert r.returncode == 0, (name, r.stdout, r.stderr)


def test_pool_servers_from_the_node_list_are_what_the_client_parses(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "scontrol.args"
    # Slurm's `scontrol show hostnames LIST`: one host a line.
    (bin_dir / "scontrol").write_text(
        '#!/bin/sh\necho "$@" > "%s"\nprintf "%%s\\n" %s\n' % (log, " ".join(HOSTS)))
    (bin_dir / "scontrol").chmod(0o755)
    out = call("pool_servers", tmp_path, PATH="%s:%s" % (bin_dir, os.environ["PATH"]),
               SLURM_JOB_NODELIST_HET_GROUP_1=NODELIST).strip()
    assert log.read_text().split() == ["show", "hostnames", NODELIST]
    assert out == ",".join("%s:7070" % h for h in HOSTS)
    # The trainer's servers: its node's socket, then the pool's hosts.
    local = "unix://" + str(tmp_path / "s" / "conveyor.sock")
    addresses = {h: "10.1.0.%d" % i for i, h in enumerate(HOSTS, 1)}
    servers = ServerSet([local] + out.split(","),
                        resolver=lambda host, port: ["%s:%d" % (addresses[host], port)])
    servers.resolve()
    got = [(e.address, e.server_name, e.is_local) for e in servers.current()]
    assert got == [(local, None, True)] + [("%s:7070" % addresses[h], h, False) for h in HOSTS]
