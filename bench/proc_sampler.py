"""What a process tree costs, read from /proc: CPU seconds, PSS (summed over
a tree, sampled in a thread), /proc/PID/status figures. Shared by the
benchmark scripts (vs_dataloader.py, index_memory.py, client_vs_ceiling.py);
Linux only, no dependencies.

    import proc_sampler as ps
    cpu0 = ps.tree_cpu_seconds(pid)
    sampler = ps.PssSampler(pid, interval=0.5); sampler.start()
    ...
    sampler.stop(); peak = sampler.peak()

Thread-safety: the functions are stateless; a PssSampler's samples are
written by its own thread and read after stop().
"""

import os
import threading
import time

CLK_TCK = os.sysconf("SC_CLK_TCK")


def now():
    """CLOCK_MONOTONIC: one clock for the driver and its contender processes."""
    return time.clock_gettime(time.CLOCK_MONOTONIC)


# --------------------------------------------------------------- /proc helpers

def _stat_fields(pid):
    """Fields of /proc/PID/stat after the command name (fields[0] is state)."""
    with open("/proc/%d/stat" % pid, "rb") as f:
        data = f.read()
    return data[data.rindex(b")") + 2:].split()


def _parent_map():
    """{pid: ppid} of every process on the machine."""
    out = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            out[int(name)] = int(_stat_fields(int(name))[1])
        except (OSError, ValueError, IndexError):
            pass  # gone meanwhile
    return out


def process_tree(root):
    """root and all its descendants (pids), root first."""
    parents = _parent_map()
    children = {}
    for pid, ppid in parents.items():
        children.setdefault(ppid, []).append(pid)
    tree, todo = [], [root]
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo.extend(children.get(pid, ()))
    return tree


def tree_cpu_seconds(root):
    """CPU seconds used so far by root's tree: utime+stime of every live
    process plus cutime+cstime (children already reaped), so that a worker
    that exits moves its time into its parent's figure, never out of the sum."""
    total = 0
    for pid in process_tree(root):
        try:
            f = _stat_fields(pid)
        except OSError:
            continue
        # fields[0] = state (field 3); utime = field 14, stime 15, cutime 16, cstime 17
        total += int(f[11]) + int(f[12]) + int(f[13]) + int(f[14])
    return total / CLK_TCK


ROLLUP_KEYS = {b"Pss:": "pss", b"Pss_Anon:": "anon", b"Pss_File:": "file", b"Pss_Shmem:": "shmem"}


def pss_rollup(pid):
    """{"pss", "anon", "file", "shmem"} in bytes from /proc/PID/smaps_rollup
    (Pss = anon + file + shmem); zeros if the process is gone."""
    out = dict.fromkeys(ROLLUP_KEYS.values(), 0)
    try:
        with open("/proc/%d/smaps_rollup" % pid, "rb") as f:
            for line in f:
                key = ROLLUP_KEYS.get(line.split(None, 1)[0]) if line.startswith(b"Pss") else None
                if key:
                    out[key] = int(line.split()[1]) * 1024
    except OSError:
        pass
    return out


def pss_bytes(pid):
    """Pss of one process, in bytes; 0 if it is gone."""
    return pss_rollup(pid)["pss"]


def tree_rollup(root, pids=None):
    """Summed pss_rollup over root's tree, plus "processes"."""
    pids = process_tree(root) if pids is None else pids
    total = dict.fromkeys(ROLLUP_KEYS.values(), 0)
    for p in pids:
        for k, v in pss_rollup(p).items():
            total[k] += v
    total["processes"] = len(pids)
    return total


def tree_pss_bytes(root, pids=None):
    t = tree_rollup(root, pids)
    return t["pss"], t["processes"]


class PssSampler(threading.Thread):
    """Samples the summed PSS of a process tree every `interval` s: a list of
    (monotonic time, bytes, processes). The tree is re-listed every
    `rescan` s (a walk over /proc), the PSS read in between. `root` may be a
    list of pids: the union of their trees."""

    def __init__(self, root, interval=0.5, rescan=2.0):
        super().__init__(daemon=True)
        self.root, self.interval, self.rescan = root, interval, rescan
        self.samples = []
        self.seen = set()  # every pid of the tree ever listed
        self._halt = threading.Event()

    def run(self):
        pids, listed = [], -1e9
        while not self._halt.is_set():
            t = now()
            if t - listed >= self.rescan:
                roots = self.root if isinstance(self.root, (list, tuple)) else [self.root]
                pids = sorted({p for r in roots for p in process_tree(r)})
                listed = t
                self.seen.update(pids)
            r = tree_rollup(self.root, pids)
            if r["pss"]:
                self.samples.append((t, r["pss"], r["processes"], r))
            self._halt.wait(self.interval)

    def stop(self):
        self._halt.set()
        self.join()

    def peak_sample(self, t0=None, t1=None):
        """The rollup dict of the sample with the largest summed PSS in [t0, t1]."""
        vals = [s for s in self.samples
                if (t0 is None or s[0] >= t0) and (t1 is None or s[0] <= t1)]
        return max(vals, key=lambda s: s[1])[3] if vals else None

    def peak(self, t0=None, t1=None):
        s = self.peak_sample(t0, t1)
        return s["pss"] if s else None


def settle(pids, seconds, timeout=60.0):
    """Waits until every process of a finished contender is gone (DataLoader
    workers and daemons exit after their parent returns, and freeing a few
    hundred MiB takes the kernel a while), then `seconds` more: the next
    contender must not pay for the previous one's teardown."""
    deadline = now() + timeout
    while now() < deadline and any(os.path.exists("/proc/%d" % pid) and
                                   not _is_zombie(pid) for pid in pids):
        time.sleep(0.05)
    time.sleep(seconds)


def _is_zombie(pid):
    try:
        return _stat_fields(pid)[0] == b"Z"
    except OSError:
        return True


def proc_cpu_seconds(pid):
    """utime + stime of one process (its threads included), in seconds."""
    f = _stat_fields(pid)
    return (int(f[11]) + int(f[12])) / CLK_TCK


def proc_status_bytes(pid, key):
    """A kB figure of /proc/PID/status (e.g. "VmRSS", "VmHWM") in bytes;
    None if the process is gone or has no such line."""
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None
