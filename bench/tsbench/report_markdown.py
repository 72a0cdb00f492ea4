"""The tables as GitHub markdown (results.md, --markdown), built from a
results.json document, and --splice: the markdown put into a document
between the lines <!-- tsbench:table --> and <!-- /tsbench:table -->.
"""

import math
import os
import re
import shutil

from tsbench.outcome import OK
from tsbench.report_text import EXTRA_TABLES, cell_label, end_rss_rows, end_rss_text, fmt, \
    paired_text
from tsbench.stats import BASELINE_KEYS, baseline_name, geomean, paired_verdict


MD_START = "<!-- tsbench:table -->"
MD_END = "<!-- /tsbench:table -->"
_MD_START_RE = re.compile(r"^[ \t]*" + re.escape(MD_START) + r"[ \t]*$", re.M)
_MD_END_RE = re.compile(r"^[ \t]*" + re.escape(MD_END) + r"[ \t]*$", re.M)


def fmt_sig(v, digits=3):
    """v with `digits` significant digits, never in exponent form."""
    if v is None:
        return "-"
    if v == 0:
        return "0"
    decimals = max(0, digits - 1 - int(math.floor(math.log10(abs(v)))))
    return "%.*f" % (decimals, v)


def md_cell(text):
    return str(text).replace("|", "\\|").replace("\n", " ")


def md_table(header, rows):
    """A GitHub table: the first column left-aligned, the others right-aligned."""
    lines = ["| " + " | ".join(md_cell(h) for h in header) + " |",
             "|" + "|".join([":---"] + ["---:"] * (len(header) - 1)) + "|"]
    for row in rows:
        lines.append("| " + " | ".join(md_cell(c) for c in row) + " |")
    return lines


def markdown_report(doc):
    """The run's results (a results.json document) as GitHub markdown: a header
    line, the time and peak-RSS tables (workload x allocator, ratio to glibc in
    parentheses), instructions per malloc/free pair when measured, then the
    cells without a number and the notes. Bad cells show the terminal's words."""
    m = doc["machine"]
    cfg = doc.get("config", {})
    names = [a["name"] for a in doc["allocators"] if a.get("available", True)]
    by_key = {(s["workload"], s["allocator"]): s for s in doc["summary"]}
    names = [n for n in names if any(k[1] == n for k in by_key)]
    wls = [w["name"] for w in doc["workloads"] if any((w["name"], n) in by_key for n in names)]
    cores = m.get("usable_cores") or m.get("cores")
    runs = cfg.get("runs", 1)
    cores_text = "%s cores" % m.get("cores")
    if m.get("usable_cores") and m.get("usable_cores") != m.get("cores"):
        cores_text += " (%s usable)" % m["usable_cores"]
    out = []
    if doc.get("interrupted"):
        out.append("**Interrupted run: some cells are missing.**")
        out.append("")
    out.append("%s**Machine:** %s, %s, kernel %s%s. **Date:** %s. **Runs:** median of %d per "
               "cell, interleaved%s. Thread counts above %s (marked `*`) oversubscribe the "
               "cores: threads time-share them and a preempted lock holder stalls its "
               "waiters." % (
                   "**Quick mode** (tiny sizes: a smoke run, not a measurement). "
                   if cfg.get("quick") else "",
                   m.get("cpu", "?"), cores_text, m.get("kernel", "?"),
                   ", " + m["glibc"] if m.get("glibc") else "",
                   (doc.get("started") or "?")[:10], runs,
                   "" if runs == 1 else " (fewer where a note says so)", cores))

    def threads_of(wl):
        cells = [by_key[(wl, n)] for n in names if (wl, n) in by_key]
        t = max((c.get("threads") or 0 for c in cells), default=0)
        over = any(c.get("oversubscribed") for c in cells)
        return ("%d" % t if t else "-") + ("*" if over else "")

    def table(value_key, ratio_key, show):
        rows = []
        for wl in wls:
            row = [wl, threads_of(wl)]
            for n in names:
                c = by_key.get((wl, n))
                if c is None:
                    row.append("")
                elif c["status"] != OK or c.get(value_key) is None:
                    row.append(cell_label(c) or "-")
                else:
                    text = show(c[value_key])
                    if n != "glibc" and c.get(ratio_key) is not None:
                        text += " (%.2f)" % c[ratio_key]
                    row.append(text)
            rows.append(row)
        geo = ["geomean vs glibc", ""]
        for n in names:
            cells = [by_key[(wl, n)] for wl in wls if (wl, n) in by_key]
            ratios = [c[ratio_key] for c in cells if c["status"] == OK and c.get(ratio_key)]
            g = geomean(ratios)
            text = fmt(g, "%.2f")
            if g is not None and len(ratios) < len(cells):
                text += " (%d of %d)" % (len(ratios), len(cells))
            geo.append(text)
        rows.append(geo)
        return md_table(["workload", "threads"] + names, rows)

    out.append("")
    out.append("**Time:** median seconds of each workload's timed section; in parentheses "
               "the ratio to glibc (below 1 is faster).")
    out.append("")
    out += table("time_s", "ratio_glibc", fmt_sig)
    if any(c.get("paired_lo") is not None for c in doc["summary"]):
        out.append("")
        out.append("**Against the fastest peer, paired by round:** the median of the "
                   "per-round ratios of each allocator's time to the fastest peer's (runs "
                   "are interleaved, so a slow spell of the machine moves both), with a "
                   "95% confidence interval; **bold** where the interval lies below 1 "
                   "(faster), *italic* where it lies above (slower). The fastest peer's "
                   "own cell names it.")
        out.append("")
        rows = []
        for wl in wls:
            row = [wl, threads_of(wl)]
            for n in names:
                c = by_key.get((wl, n))
                if c is None or c["status"] != OK:
                    row.append("")
                elif c.get("best_peer") == n:
                    row.append("fastest peer")
                else:
                    text, verdict = paired_text(c, ", "), paired_verdict(c)
                    row.append("**%s**" % text if verdict == "faster" else
                               "*%s*" % text if verdict == "slower" else text)
            rows.append(row)
        out += md_table(["workload", "threads"] + names, rows)
    base = baseline_name(doc["summary"])
    if base:
        out.append("")
        out.append("**Against the baseline %s, paired by round:** the median of the "
                   "per-round ratios of each allocator's time to %s's, with a 95%% confidence "
                   "interval; **bold** faster, *italic* slower (`--baseline`: a regression "
                   "check against another build)." % (base, base))
        out.append("")
        others = [n for n in names if n != base]
        rows = []
        for wl in wls:
            row = [wl, threads_of(wl)]
            for n in others:
                c = by_key.get((wl, n))
                if c is None or c.get("paired_baseline") is None:
                    row.append("")
                else:
                    text = paired_text(c, ", ", BASELINE_KEYS)
                    verdict = paired_verdict(c, BASELINE_KEYS)
                    row.append("**%s**" % text if verdict == "faster" else
                               "*%s*" % text if verdict == "slower" else text)
            rows.append(row)
        out += md_table(["workload", "threads"] + others, rows)
    out.append("")
    out.append("**Peak RSS:** MiB (the kernel's `ru_maxrss`); in parentheses the ratio to "
               "glibc.")
    out.append("")
    out += table("maxrss_kb", "rss_ratio_glibc", lambda kb: "%.1f" % (kb / 1024))
    for key, title, note, divisor in EXTRA_TABLES:
        end_rows = end_rss_rows(by_key, names, wls, key, divisor)
        if not end_rows:
            continue
        out.append("")
        out.append("**%s:** %s; in parentheses the ratio to glibc." % (title, note))
        out.append("")
        out += md_table(["workload"] + names, [
            [wl] + [end_rss_text(n, mib, ratio) for n, mib, ratio in vals]
            for wl, vals in end_rows])

    callgrind = doc.get("callgrind") or {}
    measured = [n for n in names if n in callgrind]
    sizes = []
    for n in measured:
        sizes = sizes or list(callgrind[n].get("instr_per_pair", {}).keys())
    if sizes:
        out.append("")
        out.append("**Instructions per malloc/free pair** (`fastpath` under callgrind, counted "
                   "inside the benchmark loop, about 10 of them the loop's own):")
        out.append("")
        rows = []
        for n in measured:
            v = callgrind[n]
            if "instr_per_pair" in v:
                rows.append([n] + ["%.0f" % v["instr_per_pair"][s]
                                   if s in v["instr_per_pair"] else "-" for s in sizes])
            else:
                rows.append([n, "error: %s" % v.get("error", "?")] + ["-"] * (len(sizes) - 1))
        out += md_table(["allocator"] + ["%s B" % s for s in sizes], rows)

    bad = [by_key[(wl, n)] for wl in wls for n in names
           if (wl, n) in by_key and by_key[(wl, n)]["status"] != OK]
    if bad:
        out.append("")
        out.append("Cells without a number:")
        out.append("")
        for c in bad:
            out.append("- `%s` on `%s`: %s%s" % (c["workload"], c["allocator"], cell_label(c),
                                                ": " + md_cell(c["reason"])
                                                if c.get("reason") else ""))
    notes = [n for n in doc.get("notes", []) if "oversubscribe" not in n]
    if notes:
        out.append("")
        out.append("Notes:")
        out.append("")
        out += ["- " + md_cell(n) for n in notes]
    return "\n".join(out) + "\n"


def splice_markdown(text, md):
    """text with md between the line <!-- tsbench:table --> and the line
    <!-- /tsbench:table -->, replacing what was there (blank lines around it,
    so that the markers never join a table or paragraph). Without the closing
    marker, it goes right after the opening one; without either, both are
    appended. Splicing the same md again changes nothing."""
    block = MD_START + "\n\n" + md.strip("\n") + "\n\n" + MD_END
    start = _MD_START_RE.search(text)
    if not start:
        if _MD_END_RE.search(text):
            raise ValueError("%s without a %s line before it" % (MD_END, MD_START))
        sep = "" if not text or text.endswith("\n\n") else ("\n" if text.endswith("\n")
                                                             else "\n\n")
        return text + sep + block + "\n"
    end = _MD_END_RE.search(text, start.end())
    rest = text[end.end():] if end else text[start.end():]
    return text[:start.start()] + block + rest


def splice_file(path, md):
    """Splices md into the file at path (see splice_markdown); True when it changed."""
    with open(path) as f:
        text = f.read()
    new = splice_markdown(text, md)
    if new == text:
        return False
    tmp = path + ".tsbench-tmp"
    with open(tmp, "w") as f:
        f.write(new)
    shutil.copymode(path, tmp)
    os.replace(tmp, path)
    return True


def write_markdown_outputs(args, md, log):
    """--markdown and --splice, for a run or for --from-json."""
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(md)
        log("markdown: %s" % os.path.abspath(args.markdown))
    if args.splice:
        try:
            changed = splice_file(args.splice, md)
        except (OSError, ValueError) as e:
            raise SystemExit("tsbench: cannot splice into %s: %s" % (args.splice, e))
        log("spliced: %s%s" % (args.splice, "" if changed else " (unchanged)"))
