"""What the daemon's GetStats figures mean, for people and for scripts.

Pure functions over conveyor_pb2.GetStatsResponse (no I/O, no terminal):
the unit of each stage's counters, the documented JSON form of `conveyor
stats --json`, and the per-interval rates of `conveyor top` computed from two
responses. Counters are totals since the daemon started; rates are deltas
over the daemon's own clock (uptime_ns, a stream's elapsed_ns).
"""

# What a stage counts: (unit of items_in and failures, unit of items_out,
# unit of the queue in front of it). Collate takes samples in and gives
# batches out; the sample stage computes one epoch order per item.
STAGE_UNITS = {
    "sample": ("epochs", "epochs", None),
    "fetch": ("samples", "samples", None),
    "decode": ("samples", "samples", "samples"),
    "collate": ("samples", "batches", "batches"),
    "deliver": ("batches", "batches", "batches"),
}
_UNKNOWN_UNITS = ("items", "items", "items")


def stage_units(name):
    """(in, out, queue) units of a stage; "items" for a stage this client does
    not know (a newer daemon)."""
    return STAGE_UNITS.get(name, _UNKNOWN_UNITS)


def _seconds(ns):
    return round(ns / 1e9, 6)


def stage_dict(s):
    unit_in, unit_out, queue_unit = stage_units(s.name)
    return {
        "name": s.name,
        "unit_in": unit_in,
        "unit_out": unit_out,
        "items_in": s.items_in,
        "items_out": s.items_out,
        "failures": s.failures,
        "busy_s": _seconds(s.busy_ns),
        "wait_input_s": _seconds(s.wait_input_ns),
        "wait_output_s": _seconds(s.wait_output_ns),
        "queue_unit": queue_unit if s.queue_capacity else None,
        "queue_size": s.queue_size,
        "queue_capacity": s.queue_capacity,
        "in_flight": s.in_flight,
    }


def stream_images_per_s(st):
    secs = st.elapsed_ns / 1e9
    return st.samples_emitted / secs if secs > 0 else 0.0


def stream_dict(st):
    return {
        "stream_id": st.stream_id,
        "pipeline": st.pipeline,
        "client": st.peer or None,
        "batches": st.batches_emitted,
        "samples": st.samples_emitted,
        "samples_failed": st.samples_failed,
        "credits_in_use": st.slots_held_by_client,
        "credits": st.slots_total,
        "elapsed_s": _seconds(st.elapsed_ns),
        "images_per_s": round(stream_images_per_s(st), 3),
        "limits": limits_dict(st.limits),
    }


def limits_dict(l):
    return {
        "fetch_concurrency": l.fetch_concurrency,
        "decode_concurrency": l.decode_concurrency,
        "fetch_queue_capacity": l.fetch_queue_capacity,
        "autotune": l.autotune,
        "autotune_changes": l.autotune_changes,
        "autotune_reason": l.autotune_reason or None,
    }


def format_limits(l):
    """One line: a stream's stage limits, and what its tuner did."""
    line = ("    limits: fetch concurrency %d, decode concurrency %d, fetch queue %d"
            % (l.fetch_concurrency, l.decode_concurrency, l.fetch_queue_capacity))
    if l.autotune:
        line += "  (autotune, %d change(s): %s)" % (l.autotune_changes, l.autotune_reason)
    return line


def delivery_dict(d):
    return {"pipeline": d.pipeline, "transport": d.transport, "batches": d.batches,
            "samples": d.images, "bytes": d.bytes}


def delivered_totals(resp):
    """What every stream since the daemon started handed to its client —
    open, finished and cancelled streams alike, since the daemon counts each
    batch as it is sent (GetStatsResponse.deliveries): {"batches", "samples",
    "bytes"}. The per-stream figures cover the open streams only."""
    total = {"batches": 0, "samples": 0, "bytes": 0}
    for d in resp.deliveries:
        total["batches"] += d.batches
        total["samples"] += d.images
        total["bytes"] += d.bytes
    return total


# --- remote hosts (GetStatsResponse.remote_hosts) ---------------------------
def remote_host_dict(h):
    """One host of the daemon's remote reader: attempts by HTTP status ("none":
    no answer), its adaptive connection limit and what lowered it."""
    count = sum(h.latency_counts)
    return {
        "host": h.host,
        "requests": {("none" if c.status == 0 else str(c.status)): c.count for c in h.attempts},
        "retries": h.retries,
        "connect_failures": h.connect_failures,
        "slow_connects": h.slow_connects,
        "bytes": h.bytes,
        "mean_latency_s": round(h.latency_sum_ns / 1e9 / count, 6) if count else None,
        "in_flight": h.in_flight,
        "queued": h.queued,
        "connection_limit": h.connection_limit,
        "max_connections": h.max_connections,
        "limit_decreases": h.limit_decreases,
        "adaptive": h.adaptive,
    }


def format_remote_hosts(resp):
    """The text lines of `conveyor stats` about remote hosts (none without)."""
    if not resp.remote_hosts:
        return []
    lines = ["", "remote hosts:"]
    for h in resp.remote_hosts:
        d = remote_host_dict(h)
        codes = " ".join("%s:%d" % kv for kv in sorted(d["requests"].items())) or "-"
        mean = "%.1f ms" % (d["mean_latency_s"] * 1e3) if d["mean_latency_s"] is not None else "-"
        lines.append("  %s  requests %s  retries %d  connect failures %d  slow connects %d  "
                     "%.1f MiB  mean %s" % (d["host"], codes, d["retries"], d["connect_failures"],
                                            d["slow_connects"], d["bytes"] / 2**20, mean))
        lines.append("    in flight %d (queued %d)  limit %d of %d (%s, lowered %d times)"
                     % (d["in_flight"], d["queued"], d["connection_limit"], d["max_connections"],
                        "adaptive" if d["adaptive"] else "fixed", d["limit_decreases"]))
    return lines


def output_cache_dict(c):
    return {"pipeline": c.pipeline, "hits": c.hits, "misses": c.misses, "inserts": c.inserts,
            "evictions": c.evictions, "entries": c.entries, "bytes": c.bytes,
            "capacity_bytes": c.capacity_bytes}


def format_output_caches(resp):
    """The text lines of `conveyor stats` about output caches (none without
    a pipeline with cache_output)."""
    if not resp.output_caches:
        return []
    lines = ["", "output caches (cache_output):"]
    for c in resp.output_caches:
        lines.append("  pipeline %s: hits %d  misses %d  evictions %d  %d samples  "
                     "%.1f of %.1f MiB"
                     % (c.pipeline, c.hits, c.misses, c.evictions, c.entries, c.bytes / 2**20,
                        c.capacity_bytes / 2**20))
    return lines


# --- object cache (GetStatsResponse.object_cache) ---------------------------
def object_cache_dict(resp):
    """The node-local object cache's figures, or None without one."""
    if not resp.HasField("object_cache"):
        return None
    c = resp.object_cache
    reads = c.hits + c.misses
    return {
        "dir": c.dir,
        "hits": c.hits,
        "misses": c.misses,
        "hit_rate": round(c.hits / reads, 4) if reads else None,
        "bytes_from_cache": c.bytes_from_cache,
        "bytes_from_network": c.bytes_from_network,
        "evictions": c.evictions,
        "fills": c.fills,
        "bytes_held": c.bytes_held,
        "entries": c.entries,
        "max_bytes": c.max_bytes,
        "read_only": c.read_only,
        "relaid_made": c.relaid_made,
        "relaid_refused": c.relaid_refused,
        "relaid_dropped": c.relaid_dropped,
    }


def format_object_cache(resp):
    """The text lines of `conveyor stats` about the object cache (none without)."""
    d = object_cache_dict(resp)
    if d is None:
        return []
    rate = "%.1f%%" % (100 * d["hit_rate"]) if d["hit_rate"] is not None else "-"
    return ["", "object cache: %s%s" % (d["dir"], "  (disk full: read-only)" if d["read_only"]
                                         else ""),
            "  hits %d  misses %d  (hit rate %s)  from cache %.1f MiB  from network %.1f MiB"
            % (d["hits"], d["misses"], rate, d["bytes_from_cache"] / 2**20,
               d["bytes_from_network"] / 2**20),
            "  held %.1f of %.1f MiB in %d entries  evictions %d"
            % (d["bytes_held"] / 2**20, d["max_bytes"] / 2**20, d["entries"], d["evictions"])] + (
                ["  relay_jpeg: %d re-laid, %d refused, %d not queued (queue full)"
                 % (d["relaid_made"], d["relaid_refused"], d["relaid_dropped"])]
                if d["relaid_made"] or d["relaid_refused"] or d["relaid_dropped"] else [])


def stats_dict(resp):
    """The JSON object of `conveyor stats --json` (keys documented in
    client/python/README.md)."""
    return {
        "threads": resp.num_threads,
        "uptime_s": _seconds(resp.uptime_ns),
        "streams_open": resp.streams_open,
        "streams_total": resp.streams_total,
        "slot_bytes_in_use": resp.slot_bytes_in_use,
        "slot_bytes_budget": resp.slot_bytes_budget,
        "bottleneck": resp.bottleneck or None,
        "stages": [stage_dict(s) for s in resp.stages],
        "streams": [stream_dict(st) for st in resp.streams],
        "delivered": delivered_totals(resp),
        "deliveries": [delivery_dict(d) for d in resp.deliveries if d.batches],
        "remote_hosts": [remote_host_dict(h) for h in resp.remote_hosts],
        "output_caches": [output_cache_dict(c) for c in resp.output_caches],
        "object_cache": object_cache_dict(resp),
    }


def _delta(cur, prev):
    # Counters only grow; a smaller value means another daemon (restart).
    return max(cur - prev, 0)


def top_frame(cur, prev=None):
    """One refresh of `conveyor top`: the figures of `cur` with rates over
    the interval since `prev` (the previous response, or None for the first
    refresh: rates are then None). A `prev` from an earlier daemon (its
    uptime is larger) counts as none.

    Load means items went through some stage during the interval; the
    bottleneck is named only then (and only when the daemon names one)."""
    if prev is not None and prev.uptime_ns >= cur.uptime_ns:
        prev = None
    dt = (cur.uptime_ns - prev.uptime_ns) / 1e9 if prev is not None else None
    prev_stages = {s.name: s for s in prev.stages} if prev is not None else {}
    threads = max(cur.num_threads, 1)
    stages = []
    moved = False
    for s in cur.stages:
        row = stage_dict(s)
        p = prev_stages.get(s.name)
        if p is None or not dt:
            row.update(in_per_s=None, out_per_s=None, busy_pct=None, failures_per_s=None)
        else:
            d_in, d_out = _delta(s.items_in, p.items_in), _delta(s.items_out, p.items_out)
            moved = moved or d_in > 0 or d_out > 0
            row.update(in_per_s=round(d_in / dt, 3), out_per_s=round(d_out / dt, 3),
                       # share of the worker pool's time this stage took
                       busy_pct=round(100.0 * _delta(s.busy_ns, p.busy_ns) / 1e9
                                      / (dt * threads), 1),
                       failures_per_s=round(_delta(s.failures, p.failures) / dt, 3))
        stages.append(row)
    prev_streams = {st.stream_id: st for st in prev.streams} if prev is not None else {}
    streams = []
    for st in cur.streams:
        row = stream_dict(st)
        p = prev_streams.get(st.stream_id)
        if p is not None and st.elapsed_ns > p.elapsed_ns:
            row["images_per_s"] = round(_delta(st.samples_emitted, p.samples_emitted)
                                        / ((st.elapsed_ns - p.elapsed_ns) / 1e9), 3)
        streams.append(row)
    load = moved if dt else None
    frame = stats_dict(cur)
    frame.update(interval_s=round(dt, 6) if dt else None, load=load,
                 bottleneck=(cur.bottleneck or None) if load else None,
                 stages=stages, streams=streams)
    return frame
