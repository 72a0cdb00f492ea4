"""Statistics over the runs: medians with min-max per cell, the check value
every allocator must agree on, ratios to glibc and to the fastest peer, and
paired ratios (per round, since runs are interleaved) with a
distribution-free 95% interval for their median, against the fastest peer
and against a --baseline allocator.
"""

import math
import statistics

from tsbench.outcome import BAD_STATUSES, OK, SKIPPED, WRONG, RunResult


def med_min_max(values):
    values = [v for v in values if isinstance(v, (int, float))]
    if not values:
        return None, None, None
    return statistics.median(values), min(values), max(values)


def check_values(wl, cells, allocators):
    """Marks runs whose check value disagrees with the reference: glibc's
    value when glibc ran, else the most common value."""
    if not wl.check_key:
        return
    values = {}
    for a in allocators:
        for r in cells.get((wl.name, a.name), []):
            if r.status == OK and wl.check_key in r.fields:
                values.setdefault(a.name, []).append(r.fields[wl.check_key])
    if not values:
        return
    if "glibc" in values:
        ref, ref_from = values["glibc"][0], "glibc"
    else:
        flat = [v for vs in values.values() for v in vs]
        ref = max(set(flat), key=flat.count)
        ref_from = "most allocators"
    for a in allocators:
        for r in cells.get((wl.name, a.name), []):
            if r.status == OK and r.fields.get(wl.check_key) != ref:
                r.status = WRONG
                r.reason = "%s=%s, expected %s (%s)" % (wl.check_key,
                                                        r.fields.get(wl.check_key), ref,
                                                        ref_from)


def early_check(wl, alloc, run, cells):
    """Once glibc has given the check value, a run that disagrees is WRONG at
    once (and its cell is not rerun); check_values settles the rest."""
    if not wl.check_key or run.status != OK or alloc.name == "glibc":
        return
    ref = next((r.fields.get(wl.check_key) for r in cells.get((wl.name, "glibc"), [])
                if r.status == OK), None)
    if ref is not None and run.fields.get(wl.check_key) != ref:
        run.status = WRONG
        run.reason = "%s=%s, expected %s (glibc)" % (wl.check_key,
                                                     run.fields.get(wl.check_key), ref)


def summarize(wl, alloc, runs, cpu_count):
    """One cell: medians over the ok runs; any bad run makes the cell bad."""
    s = {"workload": wl.name, "allocator": alloc.name, "runs": len(runs),
         "runs_ok": sum(r.status == OK for r in runs)}
    bad = [r for r in runs if r.status != OK]
    if not runs:
        s["status"], s["reason"] = SKIPPED, "not run"
    elif bad:
        worst = next((r for r in bad if r.status in BAD_STATUSES), bad[0])
        s["status"] = worst.status
        s["reason"] = worst.reason
        if len(runs) > 1:
            s["reason"] = "%d of %d runs: %s" % (len(bad), len(runs), worst.reason)
    else:
        s["status"], s["reason"] = OK, ""
    ok = [r for r in runs if r.status == OK]
    for key, getter in (("time_s", RunResult.time_s), ("wall_s", lambda r: r.wall_s),
                        ("user_s", lambda r: r.user_s), ("sys_s", lambda r: r.sys_s),
                        ("maxrss_kb", lambda r: r.maxrss_kb),
                        ("sbrk_growth_bytes", lambda r: r.fields.get("sbrk_growth_bytes"))):
        m, lo, hi = med_min_max([getter(r) for r in ok])
        s[key] = m
        s[key + "_min"] = lo
        s[key + "_max"] = hi
    threads = [r.fields.get("threads") for r in runs if isinstance(r.fields.get("threads"), int)]
    s["threads"] = max(threads) if threads else None
    s["oversubscribed"] = bool(s["threads"] and s["threads"] > cpu_count)
    if s["status"] != OK:
        for key in list(s):
            if key.startswith(("time_s", "wall_s", "user_s", "sys_s", "maxrss_kb",
                               "sbrk_growth")):
                s[key] = None  # a failed cell has no time: it must not look fast
    extras = {}
    for r in ok:
        for k, v in r.fields.items():
            if k not in ("time_s", "threads", "check", "sbrk_growth_bytes", "malloc_from") \
                    and isinstance(v, (int, float)):
                extras.setdefault(k, []).append(v)
    s["extra"] = {k: statistics.median_low(v) for k, v in extras.items()} \
        if s["status"] == OK else {}
    return s


def median_ci(values, level=0.95):
    """The median of values and a distribution-free confidence interval for
    it: the order statistics x(k) and x(n+1-k), with k the largest for which
    2 * P(Binomial(n, 1/2) < k) <= 1 - level. The interval is (None, None)
    when n is too small for the level (fewer than 6 values for 95%)."""
    xs = sorted(values)
    n = len(xs)
    if not n:
        return None, None, None
    # In integers: 2 * sum_{j<k} C(n, j) / 2^n <= 1 - level, without floats
    # that overflow for n >= 1024.
    k, below, whole = 0, 0, 2 ** n
    allowed = round((1 - level) * 10 ** 6)
    for j in range(n):
        below += math.comb(n, j)
        if 2 * below * 10 ** 6 > allowed * whole:
            break
        k = j + 1
    if k == 0:
        return statistics.median(xs), None, None
    return statistics.median(xs), xs[k - 1], xs[n - k]


def paired_ratios(runs, peer_runs):
    """Per round, this cell's time over the peer's: runs are interleaved, so
    run i of each cell ran at about the same moment, and a slow spell of the
    machine moves both sides of the ratio."""
    return [a.time_s() / b.time_s() for a, b in zip(runs, peer_runs)
            if a.status == OK and b.status == OK and a.time_s() and b.time_s()]


PAIRED_KEYS = ("paired_best_peer", "paired_lo", "paired_hi", "paired_n")
BASELINE_KEYS = ("paired_baseline", "baseline_lo", "baseline_hi", "baseline_n")


def paired_verdict(c, keys=PAIRED_KEYS):
    """faster / slower when the paired interval lies below / above 1, tie when
    it holds 1, None without an interval."""
    lo, hi = c.get(keys[1]), c.get(keys[2])
    if lo is None or hi is None:
        return None
    return "faster" if hi < 1 else "slower" if lo > 1 else "tie"


def add_ratios(summaries, allocators, cells=None, baseline=None, best_of="peers"):
    """ratio_glibc, ratio_best_peer for time and peak RSS, per workload; given
    the runs (cells), also the paired ratio to the best peer's time: the
    median of the per-round ratios with its 95% interval (paired_best_peer,
    paired_lo, paired_hi, over paired_n rounds), and with a baseline (an
    allocator's name: --baseline) the same against its time (BASELINE_KEYS).
    best_of "all": the reference is the fastest allocator of any kind."""
    by_wl = {}
    for s in summaries:
        by_wl.setdefault(s["workload"], []).append(s)
    peers = {a.name for a in allocators if a.kind == "peer" or best_of == "all"}
    for wl_cells in by_wl.values():
        glibc = next((c for c in wl_cells if c["allocator"] == "glibc" and c["status"] == OK),
                     None)
        peer_ok = [c for c in wl_cells if c["allocator"] in peers and c["status"] == OK]
        for metric, prefix in (("time_s", "ratio"), ("maxrss_kb", "rss_ratio")):
            best = min(peer_ok, key=lambda c: c[metric], default=None)
            for c in wl_cells:
                v = c.get(metric)
                c[prefix + "_glibc"] = (v / glibc[metric] if v is not None and glibc
                                        and glibc[metric] else None)
                c[prefix + "_best_peer"] = (v / best[metric] if v is not None and best
                                            and best[metric] else None)
                if metric == "time_s":
                    c["best_peer"] = best["allocator"] if best else None
        for c in wl_cells:
            for key in PAIRED_KEYS:
                c.setdefault(key, None)
            best = c["best_peer"]
            if cells is None or best is None or c["status"] != OK or c["allocator"] == best:
                continue
            xs = paired_ratios(cells.get((c["workload"], c["allocator"]), []),
                               cells.get((c["workload"], best), []))
            med, lo, hi = median_ci(xs)
            c.update(paired_best_peer=med, paired_lo=lo, paired_hi=hi, paired_n=len(xs))
        for c in wl_cells:
            for key in BASELINE_KEYS:
                c.setdefault(key, None)
            if cells is None or baseline is None or c["status"] != OK or \
                    c["allocator"] == baseline:
                continue
            xs = paired_ratios(cells.get((c["workload"], c["allocator"]), []),
                               cells.get((c["workload"], baseline), []))
            med, lo, hi = median_ci(xs)
            c.update(paired_baseline=med, baseline_lo=lo, baseline_hi=hi, baseline_n=len(xs))


def geomean(values):
    values = [v for v in values if v and v > 0]
    if not values:
        return None
    return math.exp(sum(math.log(v) for v in values) / len(values))


def baseline_name(summaries):
    """The --baseline allocator of these results: the one without a ratio to
    it in a workload where the others have one; None without a baseline."""
    with_ratio = {s["workload"] for s in summaries if s.get("paired_baseline") is not None}
    return next((s["allocator"] for s in summaries if s["workload"] in with_ratio
                 and s.get("paired_baseline") is None and s["status"] == OK), None)
