"""The self-contained HTML report of a run (report.html): machine,
allocators, notes, the ratio tables, the plots inlined, then one table per
workload and the instruction counts.
"""

import base64
import html

from tsbench.allocators import APT_LINE
from tsbench.outcome import OK
from tsbench.probes import CALLGRIND_ITERS
from tsbench.report_text import (EXTRA_TABLES, cell_label, end_rss_rows, end_rss_text, fmt,
                                 fmt_ms, paired_text)
from tsbench.stats import geomean, paired_verdict


HTML_STYLE = """
body{font-family:system-ui,sans-serif;margin:2em;max-width:1300px;color:#222}
table{border-collapse:collapse;margin:0.5em 0 1.5em 0;font-size:13px}
th,td{border:1px solid #ccc;padding:3px 7px;text-align:right;white-space:nowrap}
td.l:last-child{white-space:normal}
th{background:#f0f0f0} td.l,th.l{text-align:left}
td.bad{color:#b00;text-align:left} .note{color:#555;font-size:13px}
.bar{display:inline-block;height:9px;background:#6a9ad0;vertical-align:middle}
.good{background:#d8f0d8} .worse{background:#f6dcdc}
img{max-width:100%;border:1px solid #ddd;margin:0.5em 0}
code{background:#f4f4f4;padding:0 3px}
"""


def ratio_class(r):
    if r is None:
        return ""
    return " class='good'" if r < 0.95 else (" class='worse'" if r > 1.05 else "")


def write_html(path, meta, summaries, allocators, workloads, plots, strace, callgrind):
    esc = html.escape
    names = [a.name for a in allocators if a.available]
    by_key = {(s["workload"], s["allocator"]): s for s in summaries}
    cores = meta["machine"]["cores"]
    m = meta["machine"]
    out = ["<!DOCTYPE html><html><head><meta charset='utf-8'><title>tsbench report</title>",
           "<style>%s</style></head><body>" % HTML_STYLE,
           "<h1>tsbench report</h1>",
           "<p class='note'>%s &middot; %d run(s) per cell, interleaved &middot; %s mode"
           " &middot; results in <code>%s</code></p>" % (
               esc(meta["started"]), meta["config"]["runs"],
               "quick" if meta["config"]["quick"] else "default", esc(meta["outdir"]))]
    out.append("<h2>Machine</h2><table>")
    for label, value in (("CPU", m["cpu"]), ("cores", "%s (%s usable)" % (m["cores"],
                                                                            m["usable_cores"])),
                         ("memory", "%s GiB" % m["memory_gb"]), ("kernel", m["kernel"]),
                         ("OS", m["os"]), ("glibc", m["glibc"]), ("tsalloc", m["tsalloc"])):
        out.append("<tr><th class='l'>%s</th><td class='l'>%s</td></tr>" % (esc(label),
                                                                           esc(str(value))))
    out.append("</table><h2>Allocators</h2><table><tr><th class='l'>name</th>"
               "<th class='l'>kind</th><th class='l'>library</th><th class='l'>version / note"
               "</th></tr>")
    for a in allocators:
        out.append("<tr><td class='l'>%s</td><td class='l'>%s</td><td class='l'>%s</td>"
                   "<td class='l%s'>%s</td></tr>" % (
                       esc(a.name), esc(a.kind), esc(a.path or "(none: system malloc)"),
                       "" if a.available else " bad",
                       esc(a.version if a.available else "MISSING: " + a.note +
                           ("; install with: " + APT_LINE if a.kind == "peer" else ""))))
    out.append("</table>")
    over = [w for w in workloads if any(
        by_key.get((w.name, n), {}).get("oversubscribed") for n in names)]
    out.append("<h2>Notes</h2><ul class='note'>")
    out.append("<li>Times are the workload's own timed section (<code>time_s</code>); wall,"
               " user and sys come from the process (wait4). Peak RSS is wait4's ru_maxrss."
               " Ratios: &lt; 1 is faster / smaller than the reference. The best peer is the"
               " fastest of jemalloc, tcmalloc and mimalloc present for that workload.</li>")
    if over:
        out.append("<li><b>Oversubscription:</b> %s run more threads than this machine's %d "
                   "cores, so threads time-share cores; lock holders get preempted, which "
                   "punishes designs that block.</li>" % (
                       ", ".join(esc(w.name) for w in over), cores))
    for n in meta["notes"]:
        out.append("<li>%s</li>" % esc(n))
    out.append("<li>A cell that crashed, timed out, failed its own checks or printed a wrong "
               "check value shows its status instead of a time.</li></ul>")

    out.append("<h2>Time relative to glibc</h2><table><tr><th class='l'>workload</th>%s</tr>"
               % "".join("<th>%s</th>" % esc(n) for n in names))
    for wl in workloads:
        cells = [by_key.get((wl.name, n)) for n in names]
        if not any(cells):
            continue
        row = ["<td class='l'>%s</td>" % esc(wl.name)]
        for c in cells:
            if c is None:
                row.append("<td></td>")
            elif c["status"] != OK:
                row.append("<td class='bad' title='%s'>%s</td>" % (esc(c["reason"]),
                                                                   cell_label(c)))
            else:
                row.append("<td%s>%s</td>" % (ratio_class(c["ratio_glibc"]),
                                              fmt(c["ratio_glibc"], "%.2f")))
        out.append("<tr>%s</tr>" % "".join(row))
    for label, key in (("geomean vs glibc", "ratio_glibc"),
                       ("geomean vs best peer", "ratio_best_peer")):
        row = ["<th class='l'>%s</th>" % label]
        for n in names:
            g = geomean([by_key[(w.name, n)][key] for w in workloads
                         if (w.name, n) in by_key and by_key[(w.name, n)]["status"] == OK])
            row.append("<th>%s</th>" % fmt(g, "%.2f"))
        out.append("<tr>%s</tr>" % "".join(row))
    out.append("</table>")

    if any(s.get("paired_lo") is not None for s in summaries):
        out.append("<h2>Time against the fastest peer, paired by round</h2><p class='note'>"
                   "Median of the per-round ratios with its 95%% interval; green: faster (the "
                   "interval lies below 1), red: slower (above 1), plain: a tie.</p>"
                   "<table><tr><th class='l'>workload</th>%s</tr>"
                   % "".join("<th>%s</th>" % esc(n) for n in names))
        colour = {"faster": " class='good'", "slower": " class='worse'"}
        for wl in workloads:
            cells = [by_key.get((wl.name, n)) for n in names]
            if not any(cells):
                continue
            row = ["<td class='l'>%s</td>" % esc(wl.name)]
            for n, c in zip(names, cells):
                if c is not None and c.get("best_peer") == n:
                    row.append("<td>fastest peer</td>")
                elif c is None or c.get("paired_best_peer") is None:
                    row.append("<td></td>")
                else:
                    row.append("<td%s>%s</td>" % (colour.get(paired_verdict(c), ""),
                                                  esc(paired_text(c))))
            out.append("<tr>%s</tr>" % "".join(row))
        out.append("</table>")

    for key, title, note, divisor in EXTRA_TABLES:
        end_rows = end_rss_rows(by_key, names, [wl.name for wl in workloads], key, divisor)
        if not end_rows:
            continue
        out.append("<h2>%s</h2><p class='note'>%s; in parentheses the "
                   "ratio to glibc.</p>"
                   "<table><tr><th class='l'>workload</th>%s</tr>"
                   % (esc(title), esc(note[0].upper() + note[1:]),
                      "".join("<th>%s</th>" % esc(n) for n in names)))
        for wl, vals in end_rows:
            out.append("<tr><td class='l'>%s</td>%s</tr>" % (esc(wl), "".join(
                "<td%s>%s</td>" % (ratio_class(ratio) if n != "glibc" else "",
                                   end_rss_text(n, mib, ratio))
                for n, mib, ratio in vals)))
        out.append("</table>")

    for title, p in plots.items():
        with open(p, "rb") as f:
            data = base64.b64encode(f.read()).decode()
        out.append("<h3>%s</h3><img alt='%s' src='data:image/png;base64,%s'>" % (
            esc(title), esc(title), data))
    if not plots:
        out.append("<p class='note'>No plots: matplotlib is not importable by this Python "
                   "(<code>make bench</code> installs it in .venv).</p>")

    out.append("<h2>Workloads</h2>")
    for wl in workloads:
        cells = [by_key[(wl.name, n)] for n in names if (wl.name, n) in by_key]
        if not cells:
            continue
        threads = max((c["threads"] or 0 for c in cells), default=0)
        head = "<h3>%s</h3><p class='note'>%s" % (esc(wl.name), esc(wl.what))
        if threads > cores:
            head += " &middot; <b>%d threads on %d cores: oversubscribed</b>" % (threads, cores)
        out.append(head + "</p>")
        tmax = max((c["time_s"] or 0 for c in cells), default=0) or 1
        traced = any(k[0] == wl.name for k in strace)
        out.append("<table><tr><th class='l'>allocator</th><th>time ms</th><th>min-max</th>"
                   "<th class='l'></th><th>&times; glibc</th><th>&times; best peer</th>"
                   "<th>paired [95%% CI]</th><th>wall ms</th><th>user s</th><th>sys s</th>"
                   "<th>peak RSS MiB</th>"
                   "<th>RSS &times; glibc</th><th>sbrk growth MiB</th>%s"
                   "<th class='l'>details</th></tr>" % (
                       "<th>syscalls</th><th>futex</th>" if traced else ""))
        for c in cells:
            st = strace.get((wl.name, c["allocator"]), {})
            if c["status"] != OK:
                out.append("<tr><td class='l'>%s</td><td class='bad' colspan='%d'>%s: %s</td>"
                           "</tr>" % (esc(c["allocator"]), 15 if traced else 13, cell_label(c),
                                      esc(c["reason"])))
                continue
            counts = ""
            if traced:
                counts = "<td%s>%s</td><td>%s</td>" % (
                    " title='%s'" % esc(st["error"]) if "error" in st else "",
                    fmt(st.get("syscalls"), "%d"), fmt(st.get("futex"), "%d"))
            extra = ", ".join("%s=%s" % (k, ("%.4g" % v) if isinstance(v, float) else v)
                              for k, v in sorted(c["extra"].items()))
            out.append(
                "<tr><td class='l'>%s</td><td>%s</td><td>%s-%s</td>"
                "<td class='l'><span class='bar' style='width:%dpx'></span></td>"
                "<td%s>%s</td><td%s>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td>"
                "<td>%s</td><td%s>%s</td><td>%s</td>%s<td class='l'>%s</td></tr>" % (
                    esc(c["allocator"]), fmt_ms(c["time_s"]), fmt_ms(c["time_s_min"]),
                    fmt_ms(c["time_s_max"]), int(120 * (c["time_s"] or 0) / tmax),
                    ratio_class(c["ratio_glibc"]), fmt(c["ratio_glibc"], "%.2f"),
                    ratio_class(c["ratio_best_peer"]), fmt(c["ratio_best_peer"], "%.2f"),
                    esc(paired_text(c)), fmt_ms(c["wall_s"]), fmt(c["user_s"], "%.2f"),
                    fmt(c["sys_s"], "%.2f"),
                    fmt(c["maxrss_kb"] / 1024 if c["maxrss_kb"] else None, "%.1f"),
                    ratio_class(c["rss_ratio_glibc"]), fmt(c["rss_ratio_glibc"], "%.2f"),
                    fmt(c["sbrk_growth_bytes"] / 1048576
                        if isinstance(c["sbrk_growth_bytes"], (int, float)) else None, "%.1f"),
                    counts, esc(extra)))
        out.append("</table>")

    if callgrind:
        sizes = []
        for v in callgrind.values():
            sizes = list(v.get("instr_per_pair", {}).keys()) or sizes
        out.append("<h2>Instructions per malloc/free pair (fastpath under callgrind)</h2>"
                   "<p class='note'>Counted inside the benchmark loop only (including about 10 "
                   "instructions of loop), %d pairs per size; stable from run to run, unlike "
                   "times.</p><table><tr><th class='l'>allocator</th>%s</tr>" % (
                       CALLGRIND_ITERS, "".join("<th>%s B</th>" % s for s in sizes)))
        for n in names:
            v = callgrind.get(n)
            if not v:
                continue
            if "error" in v:
                out.append("<tr><td class='l'>%s</td><td class='bad' colspan='%d'>%s</td></tr>"
                           % (esc(n), max(1, len(sizes)), esc(v["error"])))
            else:
                out.append("<tr><td class='l'>%s</td>%s</tr>" % (esc(n), "".join(
                    "<td>%s</td>" % v["instr_per_pair"].get(s, "-") for s in sizes)))
        out.append("</table>")
    out.append("<p class='note'>Raw data: runs.csv, summary.csv, results.json in this "
               "directory. Command: <code>%s</code></p></body></html>" % esc(meta["command"]))
    with open(path, "w") as f:
        f.write("\n".join(out))
