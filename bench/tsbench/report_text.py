"""Text of report cells that every format shares: numbers, a bad cell's
status word, a paired ratio with its interval, and the rows of the tables
of a workload's own memory figures ("resident at the end", "resident per
thread": EXTRA_TABLES).
"""

from tsbench.outcome import CRASHED, FAILED, OK, SKIPPED, TIMEOUT, WRONG
from tsbench.stats import PAIRED_KEYS


def fmt(v, spec="%.3f", none="-"):
    return none if v is None else spec % v


def fmt_ms(seconds, none="-"):
    """Seconds shown as milliseconds with about four significant digits."""
    if seconds is None:
        return none
    ms = seconds * 1000
    for limit, spec in ((100, "%.0f"), (10, "%.1f"), (1, "%.2f")):
        if ms >= limit:
            return spec % ms
    return "%.3f" % ms


def cell_label(s):
    if s["status"] == OK:
        return None
    return {FAILED: "FAILED", CRASHED: "CRASHED", TIMEOUT: "TIMEOUT", WRONG: "WRONG",
            SKIPPED: "SKIPPED"}.get(s["status"], s["status"].upper())


def short_status(status):
    return {TIMEOUT: "T", CRASHED: "C", FAILED: "F", WRONG: "W", SKIPPED: "S"}.get(status, "?")


def paired_text(c, sep="-", keys=PAIRED_KEYS):
    """0.92 [0.85-0.99]; 0.92 (3 rounds) without an interval; - without pairs."""
    med, lo, hi, n = (c.get(k) for k in keys)
    if med is None:
        return "-"
    if lo is None:
        return "%.2f (%d rounds)" % (med, n)
    return "%.2f [%.2f%s%.2f]" % (med, lo, sep, hi)


END_RSS_NOTE = ("what a workload still holds resident at its end (its rss_end_kb: churn "
                "after the last wave, the idle-owner workloads after their wait, a "
                "command's last RSS sample before it exited), median MiB")


PER_THREAD_NOTE = ("what each thread adds to the resident set beyond its stack while it "
                   "holds eight blocks of 16 B - 2 KiB (thread-overhead's "
                   "rss_per_thread_kb), median KiB")

# The extra numbers that get a table of their own in every report: (result
# key, title, note, divisor from KiB to the unit shown).
EXTRA_TABLES = [("rss_end_kb", "Resident at the end", END_RSS_NOTE, 1024.0),
                ("rss_per_thread_kb", "Resident per thread", PER_THREAD_NOTE, 1.0)]


def end_rss_rows(by_key, names, workload_names, key="rss_end_kb", divisor=1024.0):
    """[(workload, [(allocator, value / divisor or None, ratio to glibc or
    None)])] for the workloads whose runs report `key` (rss_end_kb in MiB
    by default)."""
    rows = []
    for wl in workload_names:
        values = {}
        for n in names:
            c = by_key.get((wl, n))
            v = (c.get("extra") or {}).get(key) if c and c["status"] == OK else None
            values[n] = v
        if not any(v is not None for v in values.values()):
            continue
        base = values.get("glibc")
        rows.append((wl, [(n, None if v is None else v / divisor,
                           v / base if v is not None and base else None)
                          for n, v in values.items()]))
    return rows


def end_rss_text(name, mib, ratio):
    """A cell of an EXTRA_TABLES table: the value (MiB, KiB), and the ratio
    to glibc."""
    return fmt(mib, "%.1f", "") + (" (%.2f)" % ratio if ratio is not None and name != "glibc"
                                  else "")
