"""deploy/k8s: the Kubernetes manifests are valid, agree with the conveyord
config they embed, and meet the Pod Security level they claim.

- Schema: every manifest (as written, and after the documented image
  substitution) validates strictly (unknown fields refused) against the
  Kubernetes API's JSON schemas of 1.29 (native sidecars) and of the newest
  version kubernetes-validate bundles, offline, in the `k8s` virtual
  environment (scripts/venvs/k8s.txt). A deliberately broken copy must fail.
- Images: only REGISTRY/NAME:VERSION placeholders (no tag-less or `latest`
  image), each one rewritten by its folder's kustomization and by the
  documented sed step.
- Config: the ConfigMap's conveyord.yaml, with every path moved under a
  temporary folder standing for the container's mounts, passes
  `conveyord --check-config`; a daemon started on it answers the manifests'
  own probe command and the trainer's CONVEYOR_SERVER. Socket folder, config
  file, dataset roots and ports are where the containers mount or expose
  them. Memory limits cover the worst case of config/README.md.
- Pod Security (tests/integration/pod_security.py): the sidecar Job passes
  "restricted" (so "baseline"); the DaemonSet and its trainer example break
  exactly the hostPath rule, and their namespace is labelled privileged.
"""

import math
import re
import subprocess
from pathlib import Path

import pytest
import yaml

import conveyor
import conveyor_integration as ci
from conveyor.daemon import DaemonProcess
from pod_security import violations

K8S = ci.SOURCE_DIR / "deploy" / "k8s"
VARIANTS = {"daemonset": ["conveyord.yaml", "trainer-example.yaml"], "sidecar": ["job.yaml"]}
MANIFESTS = [K8S / v / f for v, files in VARIANTS.items() for f in files]
IMAGE_PLACEHOLDERS = {"REGISTRY/conveyord:VERSION", "REGISTRY/conveyor-trainer:VERSION"}
SCHEMA_VERSIONS = ("1.29.0", "1.37.0")
# What the worst case of config/README.md cannot read from a config: the
# dataset index (ImageNet-1k is about 15 MiB) and the fixed part (code, gRPC).
INDEX_AND_FIXED = 320 * 2**20


def load(path):
    return [d for d in yaml.safe_load_all(Path(path).read_text()) if d]


def pod_specs(docs):
    """(kind/name, pod spec) of every workload in docs."""
    for d in docs:
        spec = d.get("spec") or {}
        if d["kind"] == "Pod":
            yield "Pod/" + d["metadata"]["name"], spec
        elif d["kind"] in ("DaemonSet", "Deployment", "StatefulSet", "Job"):
            yield "%s/%s" % (d["kind"], d["metadata"]["name"]), spec["template"]["spec"]


def containers(spec):
    return (spec.get("initContainers") or []) + (spec.get("containers") or [])


def daemon_container(spec):
    found = [c for c in containers(spec) if "conveyord" in c["image"] and "args" in c]
    assert len(found) == 1, [c["name"] for c in containers(spec)]
    return found[0]


SED_EXPRESSIONS = re.findall(r"-e '(s#[^']*#)'", (K8S / "README.md").read_text())


def documented_sed(text):
    """The substitution deploy/k8s/README.md documents for plain kubectl:
    its sed expressions (s#OLD#NEW#), applied as sed would."""
    assert len(SED_EXPRESSIONS) == 2, SED_EXPRESSIONS
    for expr in SED_EXPRESSIONS:
        _, old, new, _ = expr.split("#")
        text = text.replace(old, new)
    return text


# --- sizes (config/README.md, "Sizes") -------------------------------------------
_UNITS = {"": 1, "B": 1, "K": 2**10, "KI": 2**10, "KIB": 2**10, "M": 2**20, "MI": 2**20,
          "MIB": 2**20, "G": 2**30, "GI": 2**30, "GIB": 2**30, "T": 2**40, "TI": 2**40,
          "TIB": 2**40, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12}


def size_bytes(v):
    m = re.fullmatch(r"\s*([0-9.]+)\s*([A-Za-z]*)\s*", str(v))
    assert m, "not an absolute size: %r" % v
    return int(float(m.group(1)) * _UNITS[m.group(2).upper()])


def quantity_bytes(q):
    """A Kubernetes memory quantity (24Gi, 512M, 1e9) in bytes."""
    m = re.fullmatch(r"([0-9.e+]+)(Ki|Mi|Gi|Ti|k|M|G|T)?", str(q))
    assert m, q
    mult = {None: 1, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "k": 10**3,
            "M": 10**6, "G": 10**9, "T": 10**12}[m.group(2)]
    return int(float(m.group(1)) * mult)


def quantity_cpus(q):
    q = str(q)
    return float(q[:-1]) / 1000 if q.endswith("m") else float(q)


def worst_case_bytes(cfg, cpu_limit):
    """config/README.md's worst case, less the index and the fixed part."""
    threads = cfg.get("threads", 0)
    if threads == 0:
        assert cpu_limit, "threads: 0 without a CPU limit: one thread per CPU of the node"
        threads = math.ceil(cpu_limit)
    engine = cfg.get("engine") or {}
    streams = cfg.get("max_streams", 64)
    pipes = cfg["pipelines"].values()
    max_file = max(size_bytes(p.get("max_file_bytes", "64MiB")) for p in pipes)
    max_decode = max(size_bytes(p.get("max_decode_memory", "128MiB")) for p in pipes)
    queue_cap = engine.get("fetch_queue_capacity", 0) or max(4, 2 * threads)
    decodes = engine.get("decode_concurrency", 0) or threads
    return (size_bytes(cfg["memory_budget"])
            + streams * (size_bytes(engine.get("fetch_queue_bytes", "64MiB"))
                         + engine.get("fetch_concurrency", 4) * max_file)
            + streams * (queue_cap + decodes) * 2**20
            + threads * max_decode)


# --- the embedded config -------------------------------------------------------
def embedded_config(docs, spec):
    """(ConfigMap key's config dict, the daemon container, its --config path)."""
    c = daemon_container(spec)
    args = c["args"]
    config_path = args[args.index("--config") + 1]
    mount = next(m for m in c["volumeMounts"]
                 if config_path.startswith(m["mountPath"].rstrip("/") + "/"))
    volume = next(v for v in spec["volumes"] if v["name"] == mount["name"])
    assert "configMap" in volume, "%s is not mounted from a ConfigMap" % config_path
    cm = next(d for d in docs if d["kind"] == "ConfigMap"
              and d["metadata"]["name"] == volume["configMap"]["name"])
    key = config_path[len(mount["mountPath"].rstrip("/")) + 1:]
    assert key in cm["data"], "ConfigMap %s has no key %s" % (cm["metadata"]["name"], key)
    return yaml.safe_load(cm["data"][key]), c, config_path


def mount_of(container, path):
    """The volume mount of container that holds path, or None."""
    best = None
    for m in container.get("volumeMounts") or []:
        mp = m["mountPath"].rstrip("/")
        if (path == mp or path.startswith(mp + "/")) and (best is None or len(mp) > len(best["mountPath"])):
            best = m
    return best


def daemon_cases():
    for variant, files in VARIANTS.items():
        docs = load(K8S / variant / files[0])
        for name, spec in pod_specs(docs):
            yield pytest.param(docs, spec, id="%s:%s" % (variant, name))


# --- schema ----------------------------------------------------------------------
@pytest.fixture(scope="module")
def k8s_python():
    return ci.venv_python("k8s")


def kubernetes_validate(python, files, version):
    return subprocess.run([python, "-m", "kubernetes_validate", "--strict", "--quiet",
                           "-k", version] + [str(f) for f in files],
                          capture_output=True, text=True, timeout=ci.scaled(300))


@pytest.mark.parametrize("version", SCHEMA_VERSIONS)
def test_manifests_validate_against_the_api_schemas(k8s_python, tmp_path, version):
    substituted = []
    for f in MANIFESTS:
        out = tmp_path / ("%s-%s" % (f.parent.name, f.name))
        out.write_text(documented_sed(f.read_text()))
        substituted.append(out)
    r = kubernetes_validate(k8s_python, MANIFESTS + substituted, version)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "ERROR" not in r.stdout + r.stderr


def test_validator_refuses_a_broken_manifest(k8s_python, tmp_path):
    """The schema check is not vacuous: an unknown field and a wrong type fail."""
    text = (K8S / "sidecar" / "job.yaml").read_text()
    bad1 = tmp_path / "unknown-field.yaml"
    bad1.write_text(text.replace("backoffLimit: 0", "backoffLimit: 0\n  backofLimit: 1"))
    bad2 = tmp_path / "wrong-type.yaml"
    bad2.write_text(text.replace("periodSeconds: 20", "periodSeconds: twenty"))
    for bad in (bad1, bad2):
        assert bad.read_text() != text
        r = kubernetes_validate(k8s_python, [bad], SCHEMA_VERSIONS[0])
        assert r.returncode != 0, "%s passed:\n%s" % (bad.name, r.stdout + r.stderr)


# --- images ----------------------------------------------------------------------
def test_images_are_placeholders_that_kustomize_and_sed_replace():
    for variant, files in VARIANTS.items():
        kustomization = yaml.safe_load((K8S / variant / "kustomization.yaml").read_text())
        assert set(kustomization["resources"]) <= set(files)
        rewritten = {i["name"] for i in kustomization["images"]}
        for f in files:
            text = (K8S / variant / f).read_text()
            assert ":latest" not in text, f
            for name, spec in pod_specs(load(K8S / variant / f)):
                for c in containers(spec):
                    assert c["image"] in IMAGE_PLACEHOLDERS, (f, name, c["name"], c["image"])
                    if f in kustomization["resources"]:
                        assert c["image"].rsplit(":", 1)[0] in rewritten, (variant, c["image"])
            assert "REGISTRY/" not in documented_sed(text), f
        for i in kustomization["images"]:
            assert i["newTag"] and i["newTag"] != "latest" and "/" in i["newName"], i


# --- Pod Security ----------------------------------------------------------------
def test_pod_security_checker_finds_violations():
    bad = {"hostNetwork": True, "volumes": [{"name": "h", "hostPath": {"path": "/"}}],
           "containers": [{"name": "c", "image": "x", "securityContext": {
               "privileged": True, "capabilities": {"add": ["SYS_ADMIN"]}},
               "ports": [{"containerPort": 80, "hostPort": 80}]}]}
    found = violations(bad, "baseline")
    for rule in ("hostNetwork", "hostPath", "privileged", "SYS_ADMIN", "hostPort"):
        assert any(rule in v for v in found), (rule, found)
    ok = {"securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
          "volumes": [{"name": "e", "emptyDir": {}}],
          "containers": [{"name": "c", "image": "x", "securityContext": {
              "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}}]}
    assert violations(ok, "restricted") == []
    ok["containers"][0]["securityContext"]["capabilities"]["add"] = ["CHOWN"]
    assert violations(ok, "baseline") == []
    assert violations(ok, "restricted") != []


def test_sidecar_job_passes_restricted():
    for name, spec in pod_specs(load(K8S / "sidecar" / "job.yaml")):
        assert violations(spec, "baseline") == [], name
        assert violations(spec, "restricted") == [], name


def test_daemonset_needs_privileged_for_hostpath_only():
    docs = load(K8S / "daemonset" / "conveyord.yaml")
    namespaces = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Namespace"}
    for f in VARIANTS["daemonset"]:
        for d in load(K8S / "daemonset" / f):
            if d["kind"] not in ("DaemonSet", "Pod"):
                continue
            spec = d["spec"]["template"]["spec"] if d["kind"] == "DaemonSet" else d["spec"]
            found = violations(spec, "baseline")
            assert found and all(v.startswith("hostPath volumes:") for v in found), (f, found)
            ns = namespaces[d["metadata"]["namespace"]]
            assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"


# --- the pod specs -----------------------------------------------------------------
@pytest.mark.parametrize("docs,spec", list(daemon_cases()))
def test_pod_spec_basics(docs, spec):
    assert spec.get("automountServiceAccountToken") is False
    classes = {d["metadata"]["name"] for d in docs if d["kind"] == "PriorityClass"}
    assert spec.get("priorityClassName") in classes, (spec.get("priorityClassName"), classes)
    for c in containers(spec):
        assert "resources" in c and c["resources"].get("limits"), c["name"]


@pytest.mark.parametrize("docs,spec", list(daemon_cases()))
def test_memory_limits_cover_the_worst_case(docs, spec):
    cfg, c, _ = embedded_config(docs, spec)
    limits, requests = c["resources"]["limits"], c["resources"]["requests"]
    cpu = quantity_cpus(limits["cpu"]) if "cpu" in limits else None
    worst = worst_case_bytes(cfg, cpu) + INDEX_AND_FIXED
    limit = quantity_bytes(limits["memory"])
    assert limit >= worst, "memory limit %s < worst case %.2f GiB" % (limits["memory"], worst / 2**30)
    assert limit <= 1.25 * worst, "memory limit %s far above the worst case %.2f GiB" % (
        limits["memory"], worst / 2**30)
    assert quantity_bytes(requests["memory"]) >= size_bytes(cfg["memory_budget"])


@pytest.mark.parametrize("docs,spec", list(daemon_cases()))
def test_manifest_agrees_with_its_config(docs, spec):
    cfg, c, _ = embedded_config(docs, spec)
    sock = cfg["listen"]["unix"]
    address = "unix://" + sock
    sock_mount = mount_of(c, str(Path(sock).parent))
    assert sock_mount and sock_mount["mountPath"] == str(Path(sock).parent), sock
    probes = [c[p]["exec"]["command"] for p in ("startupProbe", "readinessProbe", "livenessProbe")
              if p in c]
    assert probes and all(p == ["conveyord", "--probe", address] for p in probes), probes
    for path in list(cfg.get("allowed_roots", [])) + [
            p["dataset"][k] for p in cfg["pipelines"].values() for k in ("root", "list")
            if k in p["dataset"]]:
        m = mount_of(c, path)
        assert m and m.get("readOnly"), "%s is not on a read-only mount" % path
    ports = set()
    for key in ("tcp", "data_tcp"):
        addr = str(cfg["listen"].get(key, "none"))
        if addr != "none" and int(addr.rsplit(":", 1)[1]) != 0:
            ports.add(int(addr.rsplit(":", 1)[1]))
    assert {p["containerPort"] for p in c.get("ports") or []} == ports
    # Trainers in the same pod, or in the example pod beside a DaemonSet.
    trainers = [t for t in containers(spec) if t is not c and "trainer" in t["image"]]
    if not trainers:
        for f in (K8S / "daemonset").glob("trainer-*.yaml"):
            trainers += [t for _, s in pod_specs(load(f)) for t in containers(s)]
    assert trainers
    for t in trainers:
        env = {e["name"]: e.get("value") for e in t.get("env") or []}
        assert env.get("CONVEYOR_SERVER") == address, t["name"]
        m = mount_of(t, str(Path(sock).parent))
        assert m and m["mountPath"] == sock_mount["mountPath"], t["name"]


@pytest.mark.parametrize("docs,spec", list(daemon_cases()))
def test_embedded_config_serves_and_answers_the_probe(docs, spec, tmp_path):
    """The config, its paths moved under tmp_path (standing for the
    container's mounts), passes --check-config; a daemon on it answers the
    manifest's probe command and lists the config's pipelines."""
    ci.require_daemon()
    cfg, c, _ = embedded_config(docs, spec)
    root = tmp_path / "c"   # short: the socket path must stay under 104 bytes

    def moved(path):
        assert mount_of(c, path), "%s is on no volume of the container" % path
        return str(root) + path

    cfg["listen"]["unix"] = moved(cfg["listen"]["unix"])
    cfg["allowed_roots"] = [moved(p) for p in cfg.get("allowed_roots", [])]
    for p in cfg["pipelines"].values():
        p["dataset"]["root"] = moved(p["dataset"]["root"])
        if not Path(p["dataset"]["root"]).exists():
            ci.make_image_folder(p["dataset"]["root"], classes=2, per_class=2)
    # Two threads and a small budget on this machine; the rest as written.
    cfg["threads"] = 2
    cfg["memory_budget"] = "256MiB"
    config = tmp_path / "conveyord.yaml"
    config.write_text(yaml.safe_dump(cfg))
    r = subprocess.run([str(ci.CONVEYORD), "--config", str(config), "--check-config"],
                       capture_output=True, text=True, timeout=ci.scaled(60))
    assert r.returncode == 0, r.stderr
    d = DaemonProcess(str(ci.CONVEYORD), str(config), workdir=str(tmp_path / "w"),
                      socket=cfg["listen"]["unix"])
    try:
        d.start(timeout=ci.scaled(60))
        for probe in ("startupProbe", "livenessProbe"):
            argv = list(c[probe]["exec"]["command"])
            assert argv[0] == "conveyord"
            argv = [str(ci.CONVEYORD)] + [a.replace("unix://", "unix://" + str(root))
                                           for a in argv[1:]]
            r = subprocess.run(argv, capture_output=True, text=True, timeout=ci.scaled(30))
            assert r.returncode == 0, (probe, argv, r.stdout, r.stderr)
        names = {p.name for p in conveyor.list_pipelines("unix://" + cfg["listen"]["unix"])}
        assert names == set(cfg["pipelines"])
    finally:
        ci.finish_daemons([d])
