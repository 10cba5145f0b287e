"""deploy/k8s: the Kubernetes manifests are valid, agree with the conveyord
config they embed, and meet the Pod Security level they claim.

- Schema: every manifest (as written, and after the documented image
  substitution) validates strictly (unknown fields refused) against the
  Kubernetes API's JSON schemas of 1.29 (native sidecars) and of the newest
  version kubernetes-validate bundles, offline, in the `k8s` virtual
  environment (scripts/venvs/k8s.txt). A deliberately broken copy must fail.
- Kustomize: each folder, as `kubectl kustomize` builds it, validates too;
  the sidecar's holds namespaced objects only (its PriorityClass is an
  optional file of its own).
- Images: only YOUR_REGISTRY/NAME:VERSION placeholders (no tag-less or
  `latest` image), which the kubelet refuses (InvalidImageName: judged by
  the Docker client's reference parser, the kubelet's) as written and as the
  kustomizations build them; each one rewritten to a valid reference by its
  folder's kustomization once newName/newTag are set, and by the documented
  sed step.
- Nodes, sizing, metrics: the DaemonSet selects GPU nodes and tolerates
  their taint; every container has requests, the daemons' memory request
  is their limit, and the DaemonSet fits the node the README names;
  metrics.listen is the named port "metrics", which the PodMonitors and
  the prometheus.io annotations scrape.
- Config: the ConfigMap's conveyord.yaml, with every path moved under a
  temporary folder standing for the container's mounts, passes
  `conveyord --check-config`; a daemon started on it answers the manifests'
  own probe command and the trainer's CONVEYOR_SERVER. Socket folder, config
  file, dataset roots and ports are where the containers mount or expose
  them. Memory limits cover the worst case of config/README.md.
- Pod Security (tests/integration/pod_security.py): the sidecar Job and the
  pool's pods pass "restricted" (so "baseline"); the DaemonSet and its
  trainer example break exactly the hostPath rule, and their namespace is
  labelled privileged.
- The pool (deploy/k8s/pool): its daemon serves TLS on the TCP listener and
  the data socket, which the headless Service exposes; a pooled Loader over
  the training Job's sidecar daemon and a pool daemon, both on their
  manifests' configs, is served by both (the pipelines' fingerprints agree);
  the HPA scales on the metric the prometheus-adapter rule makes of a
  counter the daemon exports; the PDB selects the pool's pods; the pool
  avoids GPU nodes; the trainer's CONVEYOR_POOL names the Service.
"""

import math
import os
import re
import shutil
import subprocess
import urllib.request
from pathlib import Path

import pytest
import yaml

import conveyor
import conveyor_integration as ci
from conveyor.daemon import DaemonProcess
from pod_security import violations

K8S = ci.SOURCE_DIR / "deploy" / "k8s"
VARIANTS = {"daemonset": ["conveyord.yaml", "trainer-example.yaml"], "sidecar": ["job.yaml"],
            "pool": ["pool.yaml", "trainer-job.yaml"]}
# Optional files beside them, not in the kustomizations: plain Kubernetes
# objects (validated with the rest) and PodMonitors (a CRD: checked here).
OPTIONAL = {"sidecar": ["priority-class.yaml"], "pool": ["prometheus-adapter-rule.yaml"]}
PODMONITORS = {"daemonset": "podmonitor.yaml", "sidecar": "podmonitor.yaml",
               "pool": "podmonitor.yaml"}
MANIFESTS = [K8S / v / f for v, files in VARIANTS.items() for f in files] + [
    K8S / v / f for v, files in OPTIONAL.items() for f in files]
IMAGE_PLACEHOLDERS = {"YOUR_REGISTRY/conveyord:VERSION", "YOUR_REGISTRY/conveyor-trainer:VERSION"}
# What a namespace-scoped user may create (the sidecar's kustomization).
NAMESPACED_KINDS = {"ConfigMap", "Secret", "ServiceAccount", "Job", "Pod", "Deployment",
                    "Service", "PersistentVolumeClaim", "Role", "RoleBinding",
                    "PodDisruptionBudget", "HorizontalPodAutoscaler"}
METRICS_PORT_NAME = "metrics"
SCHEMA_VERSIONS = ("1.29.0", "1.37.0")
# What the worst case of config/README.md cannot read from a config: the
# dataset index (ImageNet-1k is about 15 MiB) and the fixed part (code, gRPC).
INDEX_AND_FIXED = 320 * 2**20


def load(path):
    return load_text(Path(path).read_text())


def load_text(text):
    return [d for d in yaml.safe_load_all(text) if d]


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


def daemon_containers(spec):
    return [c for c in containers(spec) if "conveyord" in c["image"] and "args" in c]


def daemon_container(spec):
    found = daemon_containers(spec)
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
    network_reads = 0
    if any("urls" in p["dataset"] or "://" in str(p["dataset"].get("shards", "")) for p in pipes):
        network_reads = engine.get("fetch_concurrency", 4)
        if engine.get("autotune", True):
            network_reads = max(network_reads, engine.get("autotune_max_fetch_concurrency", 64))
    return (size_bytes(cfg["memory_budget"])
            + streams * max(size_bytes(engine.get("fetch_queue_bytes", "64MiB")), max_file)
            + threads * max_file
            + streams * network_reads * max_file
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
    """(variant, docs, pod spec) of every workload that runs conveyord."""
    for variant, files in VARIANTS.items():
        for f in files:
            docs = load(K8S / variant / f)
            for name, spec in pod_specs(docs):
                if daemon_containers(spec):
                    yield pytest.param(variant, docs, spec, id="%s:%s" % (variant, name))


def test_every_variant_has_a_daemon_case():
    assert {p.values[0] for p in daemon_cases()} == set(VARIANTS)


# --- kustomize, image references ------------------------------------------------
def kubectl():
    path = shutil.which("kubectl")
    if path is None:
        pytest.skip("kubectl (its built-in kustomize) is not installed")
    return path


def kustomize_build(folder):
    """The objects `kubectl kustomize folder` builds (what apply -k applies)."""
    r = subprocess.run([kubectl(), "kustomize", str(folder)], capture_output=True, text=True,
                       timeout=ci.scaled(60))
    assert r.returncode == 0, r.stderr
    return r.stdout


def all_images(docs):
    return [c["image"] for _, spec in pod_specs(docs) for c in containers(spec)]


@pytest.fixture(scope="module")
def image_reference_valid(tmp_path_factory):
    """Whether the kubelet accepts an image reference: it parses it with
    distribution/reference's ParseNormalizedNamed before pulling, and a
    failure is the container's InvalidImageName. The Docker client's `pull`
    runs that parser first, then connects to the daemon: here to a socket
    that does not exist, so that nothing is ever pulled."""
    docker = shutil.which("docker")
    if docker is None:
        pytest.skip("the docker client (distribution/reference's parser) is not installed")
    tmp = tmp_path_factory.mktemp("docker")
    env = dict(os.environ, DOCKER_HOST="unix://%s/no-daemon.sock" % tmp,
               DOCKER_CONFIG=str(tmp / "config"))
    env.pop("DOCKER_CONTEXT", None)

    def valid(ref):
        r = subprocess.run([docker, "pull", "--quiet", ref], capture_output=True, text=True,
                           env=env, timeout=ci.scaled(30))
        out = r.stdout + r.stderr
        assert r.returncode != 0, out
        if "invalid reference format" in out or "must be lowercase" in out:
            return False
        assert "connect to the Docker daemon" in out, (ref, out)
        return True

    return valid


def test_image_reference_check_tells_valid_from_invalid(image_reference_valid):
    for ref in ("registry.example.com/ml/conveyord:1.4.0", "conveyord:0.1.0",
                "registry.example.com:5000/ml/conveyord@sha256:" + "a" * 64,
                # The old placeholder: a valid reference (the host "REGISTRY"),
                # so it failed with ErrImagePull, not InvalidImageName.
                "REGISTRY/conveyord:VERSION"):
        assert image_reference_valid(ref), ref
    for ref in ("YOUR_REGISTRY/conveyord:VERSION", "registry.example.com/ml/Conveyord:1",
                "conveyord:bad tag", "registry.example.com/ml/conveyord:"):
        assert not image_reference_valid(ref), ref


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


@pytest.mark.parametrize("version", SCHEMA_VERSIONS)
def test_kustomize_builds_validate_against_the_api_schemas(k8s_python, tmp_path, version):
    built = []
    for variant in VARIANTS:
        out = tmp_path / ("%s-built.yaml" % variant)
        out.write_text(kustomize_build(K8S / variant))
        assert load(out), variant
        built.append(out)
    r = kubernetes_validate(k8s_python, built, version)
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
            assert "YOUR_REGISTRY/" not in documented_sed(text), f
        # As shipped the kustomization keeps the placeholders (README: apply
        # -k unchanged fails with InvalidImageName, like apply -f).
        for i in kustomization["images"]:
            assert "%s:%s" % (i["newName"], i["newTag"]) in IMAGE_PLACEHOLDERS, i


def test_unchanged_manifests_and_builds_name_images_the_kubelet_refuses(image_reference_valid):
    for variant, files in VARIANTS.items():
        built = all_images(load_text(kustomize_build(K8S / variant)))
        assert built and set(built) <= IMAGE_PLACEHOLDERS, (variant, built)
        written = [i for f in files for i in all_images(load(K8S / variant / f))]
        for ref in set(built) | set(written):
            assert not image_reference_valid(ref), "%s: %s would be pulled" % (variant, ref)
        for f in files:
            for ref in all_images(load_text(documented_sed((K8S / variant / f).read_text()))):
                assert image_reference_valid(ref), (f, ref)


def test_setting_the_kustomization_images_gives_valid_references(image_reference_valid, tmp_path):
    """What `kustomize edit set image NAME=REF` writes: newName/newTag of the
    entry named after the placeholder. The build then names those images."""
    for variant in VARIANTS:
        folder = tmp_path / variant
        shutil.copytree(K8S / variant, folder)
        k = yaml.safe_load((folder / "kustomization.yaml").read_text())
        want = set()
        for i in k["images"]:
            i["newName"] = "registry.example.com/ml/" + i["name"].rsplit("/", 1)[1]
            i["newTag"] = "1.4.0"
            want.add("%s:%s" % (i["newName"], i["newTag"]))
        (folder / "kustomization.yaml").write_text(yaml.safe_dump(k))
        built = set(all_images(load_text(kustomize_build(folder))))
        assert built == want, (variant, built)
        assert all(image_reference_valid(ref) for ref in built), built


# --- what each folder applies -----------------------------------------------------
def test_sidecar_kustomization_is_namespaced_only():
    """A namespace-scoped user applies the sidecar whole: nothing
    cluster-scoped (its PriorityClass is priority-class.yaml, outside)."""
    built = [d for d in load_text(kustomize_build(K8S / "sidecar")) if d]
    kinds = {d["kind"] for d in built}
    assert kinds <= NAMESPACED_KINDS, kinds - NAMESPACED_KINDS
    assert {"ConfigMap", "Job"} <= kinds
    assert all("namespace" not in d["metadata"] for d in built)  # the user's namespace
    optional = load(K8S / "sidecar" / "priority-class.yaml")
    assert [d["kind"] for d in optional] == ["PriorityClass"]
    # The class the Job's comment names is the one the optional file defines.
    name = optional[0]["metadata"]["name"]
    assert re.search(r"#\s*priorityClassName: %s\b" % re.escape(name),
                     (K8S / "sidecar" / "job.yaml").read_text())


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
@pytest.mark.parametrize("variant,docs,spec", list(daemon_cases()))
def test_pod_spec_basics(variant, docs, spec):
    assert spec.get("automountServiceAccountToken") is False
    if "priorityClassName" in spec:
        classes = {d["metadata"]["name"] for d in docs if d["kind"] == "PriorityClass"}
        assert spec["priorityClassName"] in classes, (spec["priorityClassName"], classes)
    for c in containers(spec):
        assert "resources" in c and c["resources"].get("limits"), c["name"]


def test_every_container_has_requests():
    for f in MANIFESTS:
        for name, spec in pod_specs(load(f)):
            for c in containers(spec):
                requests = (c.get("resources") or {}).get("requests") or {}
                assert {"cpu", "memory"} <= set(requests), (f.name, name, c["name"])
                limits = c["resources"].get("limits") or {}
                if "cpu" in limits:
                    assert quantity_cpus(requests["cpu"]) <= quantity_cpus(limits["cpu"])
                if "memory" in limits:
                    assert quantity_bytes(requests["memory"]) <= quantity_bytes(limits["memory"])


def test_daemonset_runs_on_gpu_nodes_and_fits_the_node_the_readme_names():
    readme = (K8S / "README.md").read_text()
    for name, spec in pod_specs(load(K8S / "daemonset" / "conveyord.yaml")):
        selector = spec.get("nodeSelector") or {}
        assert selector == {"nvidia.com/gpu.present": "true"}, selector
        assert "nvidia.com/gpu.present" in readme
        assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in (
            spec.get("tolerations") or []), spec.get("tolerations")
        m = re.search(r"a GPU node\s+of (\d+) CPUs and (\d+) GiB schedules", readme)
        assert m, "README.md names no node size the DaemonSet fits"
        cpus, gib = int(m.group(1)), int(m.group(2))
        total_cpu = sum(quantity_cpus(c["resources"]["requests"]["cpu"])
                        for c in spec["containers"])
        total_mem = sum(quantity_bytes(c["resources"]["requests"]["memory"])
                        for c in spec["containers"])
        assert total_cpu <= cpus and total_mem <= gib * 2**30, (name, total_cpu, total_mem)


@pytest.mark.parametrize("variant,docs,spec", list(daemon_cases()))
def test_daemon_memory_request_is_its_limit(variant, docs, spec):
    """README, "Sizing": memory is not compressible, so the request is the
    limit (the worst case), while the CPU request is below the limit."""
    _, c, _ = embedded_config(docs, spec)
    requests, limits = c["resources"]["requests"], c["resources"]["limits"]
    assert quantity_bytes(requests["memory"]) == quantity_bytes(limits["memory"])
    assert quantity_cpus(requests["cpu"]) < quantity_cpus(limits["cpu"])


def metrics_port(cfg):
    listen = str((cfg.get("metrics") or {}).get("listen", "none"))
    assert listen != "none", "metrics.listen is off"
    return int(listen.rsplit(":", 1)[1])


@pytest.mark.parametrize("variant,docs,spec", list(daemon_cases()))
def test_metrics_port_is_named_and_scraped(variant, docs, spec):
    cfg, c, _ = embedded_config(docs, spec)
    port = metrics_port(cfg)
    named = {p.get("name"): p["containerPort"] for p in c.get("ports") or []}
    assert named.get(METRICS_PORT_NAME) == port, named
    # The workload whose pod template this is, and its annotations.
    workload = next(d for d in docs if d["kind"] in ("DaemonSet", "Deployment", "Job")
                    and d["spec"]["template"]["spec"] is spec)
    template = workload["spec"]["template"]
    annotations = template["metadata"].get("annotations") or {}
    assert annotations.get("prometheus.io/scrape") == "true"
    assert annotations.get("prometheus.io/port") == str(port)
    assert annotations.get("prometheus.io/path") == "/metrics"
    # An optional PodMonitor of the folder selects these pods and scrapes that port.
    monitors = load(K8S / variant / PODMONITORS[variant])
    assert monitors and all(m["kind"] == "PodMonitor" for m in monitors)
    labels = template["metadata"]["labels"]
    selecting = [m for m in monitors if m["spec"]["selector"]["matchLabels"] and all(
        labels.get(k) == v for k, v in m["spec"]["selector"]["matchLabels"].items())]
    assert len(selecting) == 1, (labels, monitors)
    pm = selecting[0]
    assert pm["apiVersion"] == "monitoring.coreos.com/v1"
    assert pm["metadata"].get("namespace") == workload["metadata"].get("namespace")
    endpoints = pm["spec"]["podMetricsEndpoints"]
    assert [(e["port"], e.get("path", "/metrics")) for e in endpoints] == [
        (METRICS_PORT_NAME, "/metrics")]
    kustomization = yaml.safe_load((K8S / variant / "kustomization.yaml").read_text())
    assert PODMONITORS[variant] not in kustomization["resources"]  # the CRD may be absent


@pytest.mark.parametrize("variant,docs,spec", list(daemon_cases()))
def test_memory_limits_cover_the_worst_case(variant, docs, spec):
    cfg, c, _ = embedded_config(docs, spec)
    limits, requests = c["resources"]["limits"], c["resources"]["requests"]
    cpu = quantity_cpus(limits["cpu"]) if "cpu" in limits else None
    worst = worst_case_bytes(cfg, cpu) + INDEX_AND_FIXED
    limit = quantity_bytes(limits["memory"])
    assert limit >= worst, "memory limit %s < worst case %.2f GiB" % (limits["memory"], worst / 2**30)
    assert limit <= 1.25 * worst, "memory limit %s far above the worst case %.2f GiB" % (
        limits["memory"], worst / 2**30)
    assert quantity_bytes(requests["memory"]) >= size_bytes(cfg["memory_budget"])


@pytest.mark.parametrize("variant,docs,spec", list(daemon_cases()))
def test_manifest_agrees_with_its_config(variant, docs, spec):
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
    ports = {metrics_port(cfg)} if cfg.get("metrics") else set()
    for key in ("tcp", "data_tcp"):
        addr = str(cfg["listen"].get(key, "none"))
        if addr != "none" and int(addr.rsplit(":", 1)[1]) != 0:
            ports.add(int(addr.rsplit(":", 1)[1]))
    assert {p["containerPort"] for p in c.get("ports") or []} == ports
    # Trainers in the same pod, or in the example pod beside a DaemonSet. (The
    # pool's trainers are in other pods, over TCP: test_pool_trainers_reach_the_service.)
    trainers = [t for t in containers(spec) if t is not c and "trainer" in t["image"]]
    if variant == "pool" and not trainers:
        assert cfg["listen"].get("tcp")
        return
    if not trainers:
        for f in (K8S / variant).glob("trainer-*.yaml"):
            trainers += [t for _, s in pod_specs(load(f)) for t in containers(s)]
    assert trainers
    for t in trainers:
        env = {e["name"]: e.get("value") for e in t.get("env") or []}
        assert env.get("CONVEYOR_SERVER") == address, t["name"]
        m = mount_of(t, str(Path(sock).parent))
        assert m and m["mountPath"] == sock_mount["mountPath"], t["name"]


# The name the pool's clients check its certificate against (pool.yaml), in
# a namespace "ml".
POOL_TLS_NAME = "conveyor-pool.ml.svc.cluster.local"


def local_config(cfg, c, tmp_path, root):
    """cfg with its paths moved under root (standing for the container's
    mounts), datasets made where missing, a TLS certificate for
    POOL_TLS_NAME where it names one, TCP on loopback; written to tmp_path.
    Returns (config file, DaemonProcess not started, Security for TCP or None)."""

    def moved(path):
        assert mount_of(c, path), "%s is on no volume of the container" % path
        return str(root) + path

    listen = cfg["listen"]
    listen["unix"] = moved(listen["unix"])
    cfg["allowed_roots"] = [moved(p) for p in cfg.get("allowed_roots", [])]
    for p in cfg["pipelines"].values():
        p["dataset"]["root"] = moved(p["dataset"]["root"])
        if not Path(p["dataset"]["root"]).exists():
            ci.make_image_folder(p["dataset"]["root"], classes=2, per_class=4)
    security = None
    tcp = None
    if listen.get("tcp"):
        # The pod's address stands for 0.0.0.0; port 0: any free one here.
        tcp = listen["tcp"] = "127.0.0.1:0"
        if str(listen.get("data_tcp", "")) not in ("", "none"):
            listen["data_tcp"] = "127.0.0.1:0"
        tls = listen.get("tls")
        if tls:
            from pki_files import make_ca, make_cert
            pki = tmp_path / "pki"
            pki.mkdir()
            ca = make_ca(pki, "ca")
            cert, key = make_cert(pki, "pool", "ca", POOL_TLS_NAME,
                                  "subjectAltName=DNS:%s\nextendedKeyUsage=serverAuth"
                                  % POOL_TLS_NAME)
            for field, made in (("cert", cert), ("key", key)):
                tls[field] = moved(tls[field])
                Path(tls[field]).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(made, tls[field])
            security = conveyor.Security(tls_ca=str(ca), tls_server_name=POOL_TLS_NAME)
    # Two threads and a small budget on this machine; the rest as written.
    cfg["threads"] = 2
    cfg["memory_budget"] = "256MiB"
    if cfg.get("metrics"):
        metrics_port(cfg)
        cfg["metrics"]["listen"] = "127.0.0.1:0"  # the pod's own address stands for 0.0.0.0
    config = tmp_path / "conveyord.yaml"
    config.write_text(yaml.safe_dump(cfg))
    d = DaemonProcess(str(ci.CONVEYORD), str(config), workdir=str(tmp_path / "w"),
                      socket=listen["unix"], tcp=tcp)
    return config, d, security


@pytest.mark.parametrize("variant,docs,spec", list(daemon_cases()))
def test_embedded_config_serves_and_answers_the_probe(variant, docs, spec, tmp_path):
    """The config, its paths moved under tmp_path (standing for the
    container's mounts), passes --check-config; a daemon on it answers the
    manifest's probe command and lists the config's pipelines (on the unix
    socket, and over TCP with TLS where the config has a TCP listener)."""
    ci.require_daemon()
    cfg, c, _ = embedded_config(docs, spec)
    root = tmp_path / "c"   # short: the socket path must stay under 104 bytes
    config, d, security = local_config(cfg, c, tmp_path, root)
    r = subprocess.run([str(ci.CONVEYORD), "--config", str(config), "--check-config"],
                       capture_output=True, text=True, timeout=ci.scaled(60))
    assert r.returncode == 0, r.stderr
    try:
        d.start(timeout=ci.scaled(60))
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            if probe not in c:
                continue
            argv = list(c[probe]["exec"]["command"])
            assert argv[0] == "conveyord"
            argv = [str(ci.CONVEYORD)] + [a.replace("unix://", "unix://" + str(root))
                                           for a in argv[1:]]
            r = subprocess.run(argv, capture_output=True, text=True, timeout=ci.scaled(30))
            assert r.returncode == 0, (probe, argv, r.stdout, r.stderr)
        names = {p.name for p in conveyor.list_pipelines("unix://" + cfg["listen"]["unix"])}
        assert names == set(cfg["pipelines"])
        if cfg["listen"].get("tcp"):
            assert d.tcp, d.log_tail()
            if cfg["listen"].get("tls"):
                # Plaintext is refused; the CA and the Service's name get in.
                with pytest.raises(conveyor.ConveyorError):
                    conveyor.list_pipelines(d.tcp, timeout=ci.scaled(5),
                                            security=conveyor.Security())
            names = {p.name for p in conveyor.list_pipelines(d.tcp, security=security)}
            assert names == set(cfg["pipelines"])
        if cfg.get("metrics"):
            # What the annotations' path scrapes on the named port.
            m = re.search(r"Prometheus metrics on http://([0-9.]+):(\d+)/metrics", d.log())
            assert m, d.log_tail()
            url = "http://%s:%s/metrics" % m.groups()
            with urllib.request.urlopen(url, timeout=ci.scaled(10)) as r:
                assert r.status == 200
                text = r.read().decode()
            assert "conveyor_" in text and all(
                'pipeline="%s"' % n in text for n in cfg["pipelines"]), text[:2000]
    finally:
        ci.finish_daemons([d])


# --- the pool (deploy/k8s/pool) ---------------------------------------------------
POOL = K8S / "pool"
STARVED_COUNTER = "conveyor_client_starved_seconds_total"


def pool_objects():
    docs = load(POOL / "pool.yaml")
    by_kind = {}
    for d in docs:
        assert d["kind"] not in by_kind, "two %ss in pool.yaml" % d["kind"]
        by_kind[d["kind"]] = d
    return docs, by_kind


def pool_config():
    docs, kinds = pool_objects()
    cfg, c, _ = embedded_config(docs, kinds["Deployment"]["spec"]["template"]["spec"])
    return cfg, c


def trainer_job():
    docs = load(POOL / "trainer-job.yaml")
    [(_, spec)] = list(pod_specs(docs))
    return docs, spec


def port_of(addr):
    return int(str(addr).rsplit(":", 1)[1])


def selects(selector, labels):
    match = selector["matchLabels"]
    return bool(match) and all(labels.get(k) == v for k, v in match.items())


def test_pool_kustomization_is_namespaced_only_and_passes_restricted():
    built = load_text(kustomize_build(POOL))
    kinds = {d["kind"] for d in built}
    assert kinds == {"ConfigMap", "Deployment", "Service", "PodDisruptionBudget",
                     "HorizontalPodAutoscaler"}, kinds
    assert kinds <= NAMESPACED_KINDS
    assert all("namespace" not in d["metadata"] for d in built)  # the user's namespace
    for f in VARIANTS["pool"]:
        for name, spec in pod_specs(load(POOL / f)):
            assert violations(spec, "baseline") == [], (f, name)
            assert violations(spec, "restricted") == [], (f, name)


def test_pool_runs_on_cpu_nodes_only():
    _, kinds = pool_objects()
    spec = kinds["Deployment"]["spec"]["template"]["spec"]
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"]
    assert terms and all({"key": "nvidia.com/gpu.present", "operator": "NotIn",
                          "values": ["true"]} in t["matchExpressions"] for t in terms), terms
    assert not spec.get("tolerations"), "the pool tolerates the GPU nodes' taint"
    for c in containers(spec):
        assert not any("gpu" in k for k in c["resources"].get("limits", {})), c["resources"]


def test_pool_service_is_headless_and_exposes_the_listeners():
    cfg, c = pool_config()
    _, kinds = pool_objects()
    svc, deploy = kinds["Service"], kinds["Deployment"]
    assert svc["spec"]["clusterIP"] == "None"
    assert svc["spec"].get("publishNotReadyAddresses") is False
    labels = deploy["spec"]["template"]["metadata"]["labels"]
    sel = svc["spec"]["selector"]
    assert sel and all(labels.get(k) == v for k, v in sel.items()), (sel, labels)
    assert selects(deploy["spec"]["selector"], labels)
    # A pod is in the DNS answer once ready: the readiness probe is the health check.
    assert c["readinessProbe"]["exec"]["command"][:2] == ["conveyord", "--probe"]
    named = {p["name"]: p["containerPort"] for p in c["ports"]}
    exposed = {}
    for p in svc["spec"]["ports"]:
        target = p.get("targetPort", p["port"])
        exposed[p["port"]] = named[target] if isinstance(target, str) else target
        assert exposed[p["port"]] == p["port"], p  # clients dial the pod's own port
    want = {port_of(cfg["listen"]["tcp"]), port_of(cfg["listen"]["data_tcp"])}
    assert 0 not in want, "the data socket needs a fixed port behind a Service"
    assert set(exposed) == want, (exposed, cfg["listen"])
    # Off loopback, TCP needs TLS or tokens: TLS from the Secret the comment
    # tells how to create, mounted where the config reads it.
    tls = cfg["listen"]["tls"]
    secret = next(v["secret"]["secretName"] for v in deploy["spec"]["template"]["spec"]["volumes"]
                  if v["name"] == mount_of(c, tls["cert"])["name"] and "secret" in v)
    assert mount_of(c, tls["key"]) == mount_of(c, tls["cert"])
    assert {Path(tls["cert"]).name, Path(tls["key"]).name} == {"tls.crt", "tls.key"}
    assert re.search(r"kubectl .*create secret tls %s --cert=\S+ --key=\S+" % re.escape(secret),
                     (POOL / "pool.yaml").read_text())


def test_pool_pdb_selects_the_pool_and_leaves_room_to_drain():
    _, kinds = pool_objects()
    pdb, hpa = kinds["PodDisruptionBudget"], kinds["HorizontalPodAutoscaler"]
    assert pdb["apiVersion"] == "policy/v1"
    assert selects(pdb["spec"]["selector"],
                   kinds["Deployment"]["spec"]["template"]["metadata"]["labels"])
    assert 1 <= pdb["spec"]["minAvailable"] < hpa["spec"]["minReplicas"]


def test_pool_hpa_scales_on_the_adapter_rule_of_a_counter_the_daemon_exports():
    _, kinds = pool_objects()
    hpa, deploy = kinds["HorizontalPodAutoscaler"], kinds["Deployment"]
    assert hpa["apiVersion"] == "autoscaling/v2"
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment",
                                             "name": deploy["metadata"]["name"]}
    assert "replicas" not in deploy["spec"], "the HPA owns the replica count"
    assert 1 <= hpa["spec"]["minReplicas"] < hpa["spec"]["maxReplicas"]
    assert hpa["spec"]["behavior"]["scaleDown"]["stabilizationWindowSeconds"] >= 60
    [metric] = hpa["spec"]["metrics"]
    assert metric["type"] == "Pods"
    target = metric["pods"]["target"]
    assert target["type"] == "AverageValue"
    assert 0.5 <= quantity_cpus(target["averageValue"]) <= 1.0, target
    # The adapter rule makes that metric of the daemon's counter.
    [cm] = load(POOL / "prometheus-adapter-rule.yaml")
    rules = yaml.safe_load(cm["data"]["config.yaml"])["rules"]
    [rule] = [r for r in rules if r["name"]["as"] == metric["pods"]["metric"]["name"]]
    assert re.match(r"%s\{" % STARVED_COUNTER, rule["seriesQuery"]), rule["seriesQuery"]
    assert re.fullmatch(rule["name"]["matches"].strip("^$"), STARVED_COUNTER)
    assert rule["resources"]["overrides"]["pod"] == {"resource": "pod"}
    assert rule["resources"]["overrides"]["namespace"] == {"resource": "namespace"}
    assert re.search(r"rate\(<<\.Series>>\{<<\.LabelMatchers>>\}\[2m\]\)", rule["metricsQuery"])
    assert "<<.GroupBy>>" in rule["metricsQuery"]
    source = (ci.SOURCE_DIR / "server" / "ops" / "metrics_exposition.cc").read_text()
    assert re.search(r'Family\("%s", "counter"' % STARVED_COUNTER, source)
    # Not applied with the pool: the adapter's config belongs to a cluster admin.
    kustomization = yaml.safe_load((POOL / "kustomization.yaml").read_text())
    assert "prometheus-adapter-rule.yaml" not in kustomization["resources"]
    assert "trainer-job.yaml" not in kustomization["resources"]


def test_pool_pipelines_are_the_trainers():
    """The client refuses a pool daemon whose fingerprint differs: the two
    configs define the same pipelines, field for field."""
    cfg, _ = pool_config()
    docs, spec = trainer_job()
    local, _, _ = embedded_config(docs, spec)
    assert cfg["pipelines"] == local["pipelines"]
    assert "tcp" not in local["listen"]  # the trainer's own daemon: its socket only


def test_pool_trainers_reach_the_service():
    """CONVEYOR_POOL names the headless Service in the Job's namespace on the
    pool's gRPC port, and the client reads it as a name to resolve into one
    daemon per address; the pool's CA is mounted where CONVEYOR_TLS_CA says."""
    from conveyor._pool_servers import ServerSet
    cfg, _ = pool_config()
    _, kinds = pool_objects()
    docs, spec = trainer_job()
    [t] = [t for t in containers(spec) if "trainer" in t["image"]]
    env = t["env"]
    names = [e["name"] for e in env]
    values = {e["name"]: e.get("value") for e in env}
    ns = next(e for e in env if e["name"] == "POD_NAMESPACE")
    assert ns["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    assert names.index("POD_NAMESPACE") < names.index("CONVEYOR_POOL")  # $(...) needs it first
    assert values["CONVEYOR_POOL"] == "%s.$(POD_NAMESPACE).svc.cluster.local:%d" % (
        kinds["Service"]["metadata"]["name"], port_of(cfg["listen"]["tcp"]))
    assert POOL_TLS_NAME.startswith(kinds["Service"]["metadata"]["name"] + ".")
    pool_entry = values["CONVEYOR_POOL"].replace("$(POD_NAMESPACE)", "ml")
    assert pool_entry.startswith(POOL_TLS_NAME + ":")
    answers = {POOL_TLS_NAME: ["10.0.1.7", "10.0.2.9"]}
    servers = ServerSet([values["CONVEYOR_SERVER"], pool_entry],
                        resolver=lambda host, port: ["%s:%d" % (a, port) for a in answers[host]])
    servers.resolve()
    got = [(e.address, e.server_name, e.is_local) for e in servers.current()]
    assert got[0][2] and not any(local for _, _, local in got[1:]), got
    assert [(a, n) for a, n, _ in got[1:]] == [("10.0.1.7:7070", POOL_TLS_NAME),
                                               ("10.0.2.9:7070", POOL_TLS_NAME)], got
    # The CA: a Secret the pool's comment tells how to create, mounted read-only.
    m = mount_of(t, values["CONVEYOR_TLS_CA"])
    assert m and m.get("readOnly"), values["CONVEYOR_TLS_CA"]
    volume = next(v for v in spec["volumes"] if v["name"] == m["name"])
    secret = volume["secret"]["secretName"]
    key = Path(values["CONVEYOR_TLS_CA"]).name
    assert re.search(r"kubectl .*create secret generic %s --from-file=%s=\S+"
                     % (re.escape(secret), re.escape(key)), (POOL / "pool.yaml").read_text())


def test_pooled_loader_draws_from_the_trainers_daemon_and_the_pool(tmp_path):
    """Both daemons on their manifests' configs (paths moved, the same
    dataset files): a pooled Loader over the trainer's socket and the pool's
    TLS listener refuses neither (fingerprints agree), gets every batch once
    from both, and the pool daemon exports the HPA's counter."""
    ci.require_daemon()
    docs, spec = trainer_job()
    local_cfg, local_c, _ = embedded_config(docs, spec)
    pool_docs, kinds = pool_objects()
    cfg, c, _ = embedded_config(pool_docs, kinds["Deployment"]["spec"]["template"]["spec"])
    lroot, proot = tmp_path / "l", tmp_path / "p"
    for p in local_cfg["pipelines"].values():
        ci.make_image_folder(str(lroot) + p["dataset"]["root"], classes=2, per_class=8)
        shutil.copytree(str(lroot) + p["dataset"]["root"], str(proot) + p["dataset"]["root"])
    (tmp_path / "lw").mkdir()
    (tmp_path / "pw").mkdir()
    _, local, _ = local_config(local_cfg, local_c, tmp_path / "lw", lroot)
    _, pool, security = local_config(cfg, c, tmp_path / "pw", proot)
    pipeline = sorted(cfg["pipelines"])[0]
    try:
        local.start(timeout=ci.scaled(60))
        pool.start(timeout=ci.scaled(60))
        loader = conveyor.Loader(servers=[local.unix, pool.tcp], pipeline=pipeline,
                                 batch_size=2, seed=0, security=security,
                                 pool=conveyor.PoolOptions(policy="balanced", range_batches=1,
                                                           ranges_ahead=1, streams_per_daemon=1))
        indices = []
        with loader.stream(num_epochs=2, first_epoch=0) as stream:
            for b in stream:
                indices.append((b.epoch, sorted(b.indices.tolist())))
            served = {d["address"]: d["ranges"] for d in stream.stats()["daemons"]}
            assert stream.refused == {}
        loader.close()
        assert len(indices) == 16
        for epoch in (0, 1):
            got = sorted(i for e, b in indices if e == epoch for i in b)
            assert got == list(range(16)), (epoch, got)
        assert served.get(pool.tcp, 0) >= 1 and served.get(local.unix, 0) >= 1, served
        m = re.search(r"Prometheus metrics on http://([0-9.]+):(\d+)/metrics", pool.log())
        assert m, pool.log_tail()
        with urllib.request.urlopen("http://%s:%s/metrics" % m.groups(),
                                    timeout=ci.scaled(10)) as r:
            text = r.read().decode()
        assert re.search(r'^%s\{pipeline="%s"\} ' % (STARVED_COUNTER, pipeline), text, re.M), \
            [line for line in text.splitlines() if "starved" in line]
    finally:
        ci.finish_daemons([local, pool])
