"""Kubernetes Pod Security Standards, "baseline" and "restricted" levels,
checked on a pod spec (a dict as in a manifest) for the tests of deploy/k8s.

violations(pod_spec, level) returns the rules the pod breaks, each a short
string naming the rule and where ("hostPath volumes: data"). The rules are
those of the published standard (policy version of Kubernetes 1.29+):

baseline: no hostProcess, no host namespaces (hostNetwork, hostPID, hostIPC),
  no privileged containers, capabilities added only from the baseline's list,
  no hostPath volumes, no hostPorts, AppArmor not unconfined, SELinux type
  from the allowed list and no custom user/role, /proc mount Default,
  seccomp not Unconfined, only safe sysctls.
restricted: all of baseline, plus volumes only of the restricted types,
  allowPrivilegeEscalation false, runAsNonRoot true, runAsUser not 0,
  seccomp RuntimeDefault or Localhost, every container drops ALL
  capabilities and adds at most NET_BIND_SERVICE.

Pure functions, no state: safe from any thread.
"""

BASELINE_CAPABILITIES = {"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL",
                         "MKNOD", "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID",
                         "SYS_CHROOT"}
SAFE_SYSCTLS = {"kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range",
                "net.ipv4.ip_unprivileged_port_start", "net.ipv4.tcp_syncookies",
                "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
                "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout",
                "net.ipv4.tcp_keepalive_intvl", "net.ipv4.tcp_keepalive_probes"}
SELINUX_TYPES = {"", "container_t", "container_init_t", "container_kvm_t",
                 "container_engine_t"}
RESTRICTED_VOLUMES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral",
                      "persistentVolumeClaim", "projected", "secret"}
LEVELS = ("baseline", "restricted")


def _containers(spec):
    for key in ("initContainers", "containers", "ephemeralContainers"):
        for c in spec.get(key) or []:
            yield "%s %s" % (key, c.get("name", "?")), c


def _baseline(spec):
    out = []
    psc = spec.get("securityContext") or {}
    for ns in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(ns):
            out.append("host namespaces: %s" % ns)
    contexts = [("pod", psc)] + [(where, c.get("securityContext") or {})
                                 for where, c in _containers(spec)]
    for where, sc in contexts:
        if (sc.get("windowsOptions") or {}).get("hostProcess"):
            out.append("hostProcess: %s" % where)
        se = sc.get("seLinuxOptions") or {}
        if se.get("type", "") not in SELINUX_TYPES:
            out.append("SELinux type %s: %s" % (se.get("type"), where))
        if se.get("user") or se.get("role"):
            out.append("SELinux user/role: %s" % where)
        if (sc.get("seccompProfile") or {}).get("type") == "Unconfined":
            out.append("seccomp Unconfined: %s" % where)
        if (sc.get("appArmorProfile") or {}).get("type") == "Unconfined":
            out.append("AppArmor unconfined: %s" % where)
    for where, c in _containers(spec):
        sc = c.get("securityContext") or {}
        if sc.get("privileged"):
            out.append("privileged: %s" % where)
        added = set((sc.get("capabilities") or {}).get("add") or [])
        if added - BASELINE_CAPABILITIES:
            out.append("capabilities %s: %s" % (sorted(added - BASELINE_CAPABILITIES), where))
        if sc.get("procMount", "Default") != "Default":
            out.append("procMount %s: %s" % (sc["procMount"], where))
        for port in c.get("ports") or []:
            if port.get("hostPort"):
                out.append("hostPort %s: %s" % (port["hostPort"], where))
    for v in spec.get("volumes") or []:
        if "hostPath" in v:
            out.append("hostPath volumes: %s" % v.get("name"))
    for s in psc.get("sysctls") or []:
        if s.get("name") not in SAFE_SYSCTLS:
            out.append("sysctl %s" % s.get("name"))
    return out


def _restricted(spec):
    out = []
    psc = spec.get("securityContext") or {}
    for v in spec.get("volumes") or []:
        kinds = set(v) - {"name"}
        if not kinds <= RESTRICTED_VOLUMES:
            out.append("volume type %s: %s" % (sorted(kinds - RESTRICTED_VOLUMES), v.get("name")))
    if psc.get("runAsUser") == 0:
        out.append("runAsUser 0: pod")
    pod_seccomp = (psc.get("seccompProfile") or {}).get("type")
    for where, c in _containers(spec):
        sc = c.get("securityContext") or {}
        if sc.get("allowPrivilegeEscalation") is not False:
            out.append("allowPrivilegeEscalation not false: %s" % where)
        if sc.get("runAsNonRoot", psc.get("runAsNonRoot")) is not True:
            out.append("runAsNonRoot not true: %s" % where)
        if sc.get("runAsUser") == 0:
            out.append("runAsUser 0: %s" % where)
        seccomp = (sc.get("seccompProfile") or {}).get("type", pod_seccomp)
        if seccomp not in ("RuntimeDefault", "Localhost"):
            out.append("seccomp profile %s: %s" % (seccomp, where))
        caps = sc.get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []):
            out.append("capabilities not dropping ALL: %s" % where)
        if set(caps.get("add") or []) - {"NET_BIND_SERVICE"}:
            out.append("capabilities added %s: %s" % (
                sorted(set(caps["add"]) - {"NET_BIND_SERVICE"}), where))
    return out


def violations(pod_spec, level):
    """The rules of `level` ("baseline" or "restricted") that pod_spec breaks."""
    if level not in LEVELS:
        raise ValueError("unknown Pod Security level %r" % level)
    out = _baseline(pod_spec)
    if level == "restricted":
        out += _restricted(pod_spec)
    return out
