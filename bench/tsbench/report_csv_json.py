"""The raw data of a run: runs.csv (one row per run), summary.csv (one per
cell) and results.json (everything, the input of --from-json), and reading
a saved results.json back into the objects the reports take.
"""

import csv
import datetime
import json
import os
import sys

from tsbench.allocators import Allocator
from tsbench.outcome import OK
from tsbench.workloads import WORKLOADS, Workload


RUN_COLUMNS = ["workload", "allocator", "run", "status", "reason", "time_s", "wall_s",
               "user_s", "sys_s", "maxrss_kb", "sbrk_growth_bytes", "threads", "check",
               "result"]


SUMMARY_COLUMNS = ["workload", "allocator", "status", "reason", "runs", "runs_ok", "threads",
                   "oversubscribed", "time_s", "time_s_min", "time_s_max", "ratio_glibc",
                   "ratio_best_peer", "best_peer", "paired_best_peer", "paired_lo",
                   "paired_hi", "paired_n", "paired_baseline", "baseline_lo", "baseline_hi",
                   "baseline_n", "wall_s", "user_s", "sys_s", "maxrss_kb",
                   "maxrss_kb_min", "maxrss_kb_max", "rss_ratio_glibc", "rss_ratio_best_peer",
                   "sbrk_growth_bytes", "syscalls", "futex", "instr_per_pair"]


def run_rows(cells):
    rows = []
    for (wl, alloc), runs in cells.items():
        for i, r in enumerate(runs, 1):
            rows.append({
                "workload": wl, "allocator": alloc, "run": i, "status": r.status,
                "reason": r.reason, "time_s": r.time_s() if r.status == OK else None,
                "wall_s": r.wall_s, "user_s": r.user_s, "sys_s": r.sys_s,
                "maxrss_kb": r.maxrss_kb, "sbrk_growth_bytes": r.fields.get("sbrk_growth_bytes"),
                "threads": r.fields.get("threads"), "check": r.fields.get("check"),
                "result": " ".join("%s=%s" % kv for kv in r.fields.items()),
                "rss_series": r.rss_series})
    return rows


def write_csv(path, columns, rows):
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=columns, extrasaction="ignore")
        w.writeheader()
        for row in rows:
            out = {}
            for k in columns:
                v = row.get(k)
                if isinstance(v, float):
                    v = "%.6g" % v
                elif isinstance(v, dict):
                    v = " ".join("%s=%s" % kv for kv in v.items())
                out[k] = "" if v is None else v
            w.writerow(out)



def write_results(outdir, args, argv, started, machine, notes, interrupted, use_callgrind,
                  allocators, workloads, cells, summaries, strace, callgrind):
    """runs.csv, summary.csv and results.json in outdir. Returns (run rows,
    meta: the run's description, doc: the whole results.json document)."""
    rows = run_rows(cells)
    write_csv(os.path.join(outdir, "runs.csv"), RUN_COLUMNS, rows)
    write_csv(os.path.join(outdir, "summary.csv"), SUMMARY_COLUMNS, summaries)
    meta = {
        "tool": "tsbench", "format": 1, "started": started,
        "finished": datetime.datetime.now().isoformat(timespec="seconds"),
        "command": " ".join(["tsbench"] + (argv if argv is not None else sys.argv[1:])),
        "outdir": outdir, "machine": machine, "notes": notes,
        "interrupted": interrupted,
        "config": {"runs": args.runs, "quick": args.quick, "build": args.build,
                   "timeout": args.timeout, "min_timeout": args.min_timeout,
                   "slow_factor": args.slow_factor, "strace": args.strace,
                   "callgrind": use_callgrind,
                   "best_of": getattr(args, "best_of", "peers")},
    }
    doc = dict(meta)
    doc["allocators"] = [a.to_json() for a in allocators]
    doc["workloads"] = [{"name": w.name, "what": w.what,
                         "args": w.quick if args.quick else w.args} for w in workloads]
    doc["summary"] = summaries
    doc["runs"] = rows
    doc["strace"] = [dict(workload=k[0], allocator=k[1], **v) for k, v in strace.items()]
    doc["callgrind"] = callgrind
    with open(os.path.join(outdir, "results.json"), "w") as f:
        json.dump(doc, f, indent=1, default=str)
    return rows, meta, doc


def load_results(path):
    """A saved results.json, checked to be tsbench's."""
    try:
        with open(path) as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        raise SystemExit("tsbench: cannot read %s: %s" % (path, e))
    if not isinstance(doc, dict) or doc.get("tool") != "tsbench" or "summary" not in doc:
        raise SystemExit("tsbench: %s is not a tsbench results.json" % path)
    return doc


def filter_results(doc, workloads=None, allocators=None):
    """doc restricted to the comma-separated workloads and allocators given."""
    doc = dict(doc)
    for key, arg, items in (("workloads", workloads, doc["workloads"]),
                            ("allocators", allocators, doc["allocators"])):
        if not arg:
            continue
        wanted = [n.strip() for n in arg.split(",") if n.strip()]
        have = [i["name"] for i in items]
        unknown = [n for n in wanted if n not in have]
        if unknown:
            raise SystemExit("tsbench: %s not in the results (they have: %s)" % (
                ", ".join(unknown), ", ".join(have)))
        doc[key] = [i for i in items if i["name"] in wanted]
    wl = {w["name"] for w in doc["workloads"]}
    al = {a["name"] for a in doc["allocators"]}
    doc["summary"] = [s for s in doc["summary"] if s["workload"] in wl and s["allocator"] in al]
    return doc


def doc_objects(doc):
    """(allocators, workloads, strace, callgrind) of a results.json, as the run has them."""
    allocators = []
    for a in doc["allocators"]:
        x = Allocator(a["name"], a.get("path"), a.get("kind", "user"), a.get("available", True),
                      a.get("note", ""), a.get("env"))
        x.version = a.get("version", "")
        allocators.append(x)
    known = {w.name: w for w in WORKLOADS}
    workloads = [Workload(w["name"], w.get("what") or getattr(known.get(w["name"]), "what", ""),
                          w.get("args", []), []) for w in doc["workloads"]]
    strace = {(s["workload"], s["allocator"]): {k: v for k, v in s.items()
                                                if k not in ("workload", "allocator")}
              for s in doc.get("strace", [])}
    return allocators, workloads, strace, doc.get("callgrind") or {}
