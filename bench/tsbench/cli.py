"""The command line: options, then either a run (measure, summarise, write
runs.csv, summary.csv, results.json, results.md, plots and report.html,
print the tables), --list, --from-json (the tables of a saved run) or
--splice-from (splice a markdown file). main() is the entry point.
"""

import argparse
import datetime
import json
import os
import shutil
import sys

from tsbench.allocators import default_peer_dir, install_peers, select_allocators
from tsbench.machine import BUSY_SHARE, BackgroundLoad, machine_info
from tsbench.outcome import BAD_STATUSES, OK
from tsbench.probes import strace_usable
from tsbench.process import find_launcher
from tsbench.report_csv_json import doc_objects, filter_results, load_results, write_results
from tsbench.report_html import write_html
from tsbench.report_markdown import markdown_report, write_markdown_outputs
from tsbench.report_plot import make_plots
from tsbench.report_table import print_report
from tsbench.runner import Context, Progress, run_callgrinds, run_workloads
from tsbench.scale import report_scale, scale_note, scale_variants
from tsbench.stats import add_ratios, summarize
from tsbench.workloads import WORKLOAD_NAMES, choose_workloads

# The source tree: bench/tsbench/cli.py is three levels below it.
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def parse_args(argv):
    repo = REPO
    argv = list(sys.argv[1:] if argv is None else argv)
    command = None
    if "--" in argv:  # tsbench [OPTIONS] -- CMD [ARGS...]: one command workload
        command = argv[argv.index("--") + 1:]
        argv = argv[:argv.index("--")]
    p = argparse.ArgumentParser(
        prog="tsbench", description="Compare allocators on the tsalloc workloads, on "
        "commands (--command, or -- CMD ARGS... at the end) and on recorded traces (--trace).",
        usage="%(prog)s [OPTIONS] [-- CMD [ARGS...]]",
        epilog="Workloads: " + ", ".join(WORKLOAD_NAMES) + ". See docs/bench.md.")
    p.add_argument("--quick", action="store_true", help="tiny sizes (smoke tests)")
    p.add_argument("--workloads", help="comma-separated subset of the workloads")
    p.add_argument("--allocators", help="comma-separated subset of the allocators")
    p.add_argument("--allocator", action="append", metavar="NAME=PATH[:VAR=VALUE...]",
                   help="add an allocator library, with environment variables for its runs "
                        "(repeatable; an empty PATH is glibc)")
    p.add_argument("--baseline", metavar="NAME",
                   help="also pair every allocator's times with NAME's, one of this run's "
                        "allocators (say an older build, given with --allocator "
                        "old=PATH): tells a regression from noise")
    p.add_argument("--command", action="append", metavar="NAME='CMD ARGS'",
                   help="a command as a workload (split like a shell, no shell run): its "
                        "wall, user and sys time, peak RSS and exit status; its output and "
                        "exit status must match glibc's (repeatable)")
    p.add_argument("--name", help="the workload name of the command after -- "
                                  "(default: its program's name)")
    p.add_argument("--stdin", metavar="FILE",
                   help="the standard input of the commands (default /dev/null)")
    p.add_argument("--trace", action="append", metavar="NAME=FILE",
                   help="a recorded trace (docs/trace-format.md) as a workload, replayed "
                        "by tsb-memsim on one thread (repeatable)")
    p.add_argument("--trace-repeats", type=int, default=1, metavar="R",
                   help="replays of each --trace per run (default %(default)s)")
    p.add_argument("--best-of", choices=["peers", "all"], default="peers",
                   help="the x-best ratio's reference: the fastest peer (default) or the "
                        "fastest allocator of the workload, whatever its kind")
    p.add_argument("--runs", type=int, help="runs per cell (default 3, --quick 1)")
    p.add_argument("--out", help="results directory (default results/<timestamp>)")
    p.add_argument("--build", default=os.path.join(repo, "build"),
                   help="build directory with bin/tsb-* and lib/libtsalloc*.so")
    p.add_argument("--lib-dir", help="the tsalloc libraries (default: BUILD/lib)")
    p.add_argument("--bin-dir", help="the workload programs and tsbench-exec "
                                     "(default: BUILD/bin)")
    p.add_argument("--peer-dir", default=default_peer_dir(),
                   help="where the peer libraries live (default: %(default)s)")
    p.add_argument("--strace", action="store_true",
                   help="one extra run per cell under strace -c -f: syscall and futex counts")
    p.add_argument("--callgrind", choices=["auto", "on", "off"], default="auto",
                   help="instructions per malloc/free pair with valgrind (auto: on unless "
                        "--quick, when valgrind is installed)")
    p.add_argument("--timeout", type=float, default=60.0,
                   help="hard limit per run in seconds (default %(default)s)")
    p.add_argument("--min-timeout", type=float, default=3.0,
                   help="a run may always take this long (default %(default)s)")
    p.add_argument("--slow-factor", type=float, default=10.0,
                   help="a run is cut off at this many times the fastest median so far "
                        "(default %(default)s)")
    p.add_argument("--cell-budget", type=float, default=4.0,
                   help="stop repeating a cell once its runs took this many seconds "
                        "(default 4, 0 for none)")
    p.add_argument("--time-budget", type=float,
                   help="past this many seconds, cells get no repeat runs (default 180, "
                        "0 for none; the default set stays within 5 minutes on a busy "
                        "2-core machine)")
    p.add_argument("--scale", type=int, metavar="N",
                   help="run the threaded workloads at 1, 2, 4, ... N threads and report "
                        "throughput and speed-up against threads (scale.csv, scale.png)")
    p.add_argument("--list", action="store_true", help="list allocators and workloads, exit")
    p.add_argument("--install-peers", action="store_true",
                   help="apt-get install missing peers when running as root")
    p.add_argument("--strict", action="store_true",
                   help="exit 1 when any cell failed, crashed, timed out or was wrong")
    p.add_argument("--no-plots", action="store_true", help="skip matplotlib even if present")
    p.add_argument("--markdown", metavar="FILE",
                   help="also write the tables as GitHub markdown to FILE")
    p.add_argument("--from-json", metavar="RESULTS.json",
                   help="do not run: print the tables (and --markdown, --splice) of a saved "
                        "results.json; --workloads and --allocators select from it")
    p.add_argument("--splice", metavar="DOC",
                   help="put the markdown into DOC between the lines <!-- tsbench:table --> "
                        "and <!-- /tsbench:table --> (both added when missing)")
    p.add_argument("--splice-from", metavar="FILE",
                   help="with --splice: splice this markdown file; nothing is run")
    args = p.parse_args(argv)
    if args.splice_from and not args.splice:
        p.error("--splice-from needs --splice DOC")
    if args.splice_from and args.from_json:
        p.error("--splice-from and --from-json both name what to splice; give one")
    args.repo = repo
    args.argv = command
    if command is not None and not command:
        p.error("no command after --")
    if args.trace_repeats < 1:
        p.error("--trace-repeats must be >= 1")
    args.build = os.path.abspath(args.build)
    args.lib_dir = os.path.abspath(args.lib_dir or os.path.join(args.build, "lib"))
    args.bin_dir = os.path.abspath(args.bin_dir or os.path.join(args.build, "bin"))
    if args.runs is None:
        args.runs = 1 if args.quick else 3
    if args.runs < 1:
        p.error("--runs must be >= 1")
    if args.time_budget is None:
        args.time_budget = 180.0
    if args.scale is not None and args.scale < 1:
        p.error("--scale must be >= 1")
    if args.scale and (args.from_json or args.splice_from):
        p.error("--scale runs workloads: it does not combine with --from-json or --splice-from")
    return args


def report_from_json(args, log):
    """--from-json: the terminal tables and the markdown of a saved run, no rerun."""
    doc = filter_results(load_results(args.from_json), args.workloads, args.allocators)
    allocators, workloads, strace, callgrind = doc_objects(doc)
    machine = doc.get("machine", {})
    cpu_count = machine.get("usable_cores") or machine.get("cores") or 1
    log("results of %s (%s)" % (os.path.abspath(args.from_json), doc.get("started", "?")))
    best_of = (doc.get("config") or {}).get("best_of", "peers")
    print_report(log, machine, doc["summary"], allocators, workloads, cpu_count, strace,
                 callgrind, doc.get("notes", []),
                 best_label="xbest" if best_of == "all" else "xpeer")
    log("")
    write_markdown_outputs(args, markdown_report(doc), log)
    return 0


def list_setup(args, workloads, bindir, log):
    """--list: the allocators found and the workloads with their arguments."""
    allocators = select_allocators(args, lambda m: None)
    log("allocators:")
    for a in allocators:
        log("  %-18s %-8s %s%s" % (a.name, a.kind, a.path or "(system malloc, no preload)",
                                   "" if a.available else "  MISSING: " + a.note))
    log("workloads (binaries in %s):" % bindir)
    for w in workloads:
        built = os.path.exists(w.binary(bindir))
        log("  %-14s %s%s" % (w.name, w.what, "" if built else "  [not built]"))
        log("  %-14s   default: %s" % ("", " ".join(w.args) or "(built-in defaults)"))
        log("  %-14s   --quick: %s" % ("", " ".join(w.quick)))
    return 0


def summarize_cells(workloads, active, cells, strace, callgrind, cpu_count):
    """One summary per cell that ran, in report order, with its strace counts
    and (for fastpath) its instructions per pair."""
    summaries = []
    for wl in workloads:
        for a in active:
            if (wl.name, a.name) in cells:
                s = summarize(wl, a, cells[(wl.name, a.name)], cpu_count)
                st = strace.get((wl.name, a.name), {})
                s["syscalls"], s["futex"] = st.get("syscalls"), st.get("futex")
                if wl.name == "fastpath" and "instr_per_pair" in callgrind.get(a.name, {}):
                    s["instr_per_pair"] = callgrind[a.name]["instr_per_pair"]
                summaries.append(s)
    return summaries


def exit_notes(workloads, summaries):
    """A command's exit status, which every ok cell shares (a differing one
    is WRONG): one note per command."""
    notes = []
    for wl in workloads:
        if getattr(wl, "kind", None) != "command":
            continue
        codes = {s["extra"].get("exit") for s in summaries
                 if s["workload"] == wl.name and s["status"] == OK}
        if len(codes) == 1:
            notes.append("%s exited with status %s under every allocator that ran it "
                         "correctly" % (wl.name, codes.pop()))
    return notes


def add_run_notes(args, notes, summaries, busy, steal, cpu_count):
    """The notes a run's report ends with: competing work, no interval, and
    oversubscription."""
    if busy is not None and busy > BUSY_SHARE:
        notes.append("other processes used %.0f%% of the CPUs during the runs: timings are "
                     "noisier than on an idle machine" % (100 * busy))
    if steal is not None and steal > BUSY_SHARE:
        notes.append("the host gave %.0f%% of the CPUs' time to other guests (steal): "
                     "timings are noisier than on an idle machine" % (100 * steal))
    if not args.quick and summaries and not any(s.get("paired_lo") is not None or
                                                s.get("baseline_lo") is not None
                                                for s in summaries):
        notes.append("no ratio has a confidence interval (that needs 6 runs or more): to "
                     "tell a difference from noise, run --runs 11 --time-budget 0 "
                     "--cell-budget 0 (docs/bench.md)")
    if any(s.get("oversubscribed") for s in summaries):
        notes.append("workloads with more threads than the %d cores oversubscribe them"
                     % cpu_count)


def main(argv=None, stdout=None, stderr=None):
    stdout = stdout or sys.stdout
    stderr = stderr or sys.stderr

    def log(msg):
        print(msg, file=stdout)
        stdout.flush()

    args = parse_args(argv)
    if args.splice_from:
        try:
            with open(args.splice_from) as f:
                md = f.read()
        except OSError as e:
            raise SystemExit("tsbench: cannot read %s: %s" % (args.splice_from, e))
        args.markdown = None
        write_markdown_outputs(args, md, log)
        return 0
    if args.from_json:
        return report_from_json(args, log)
    if args.install_peers:
        install_peers(args.peer_dir, log)
    workloads = choose_workloads(args, log)
    bindir = args.bin_dir
    if args.list:
        return list_setup(args, workloads, bindir, log)

    allocators = select_allocators(args, log)
    active = [a for a in allocators if a.available]
    if not active:
        log("tsbench: no allocator to run")
        return 1
    if args.baseline and args.baseline not in [a.name for a in active]:
        log("tsbench: --baseline %s is not one of the allocators run (%s)"
            % (args.baseline, ", ".join(a.name for a in active)))
        return 2
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    outdir = os.path.abspath(args.out or os.path.join("results", stamp))
    os.makedirs(outdir, exist_ok=True)
    ctx = Context(bindir, outdir, args.quick)
    try:
        cpu_count = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpu_count = os.cpu_count() or 1
    base_workloads = workloads
    if args.scale:
        workloads = scale_variants(workloads, args.scale, args.quick, ctx.notes)
        if not workloads:
            log("tsbench: --scale: none of the workloads has a thread argument")
            return 2
        note = scale_note(args.scale, cpu_count)
        if note:
            ctx.notes.append(note)
    launcher = find_launcher(bindir)
    if not launcher:
        ctx.notes.append("bin/tsbench-exec is not built: peak RSS includes the runner's own "
                         "(about 20 MB) as a floor")

    strace_note = None
    if args.strace:
        strace_note = strace_usable()
        if strace_note:
            log("tsbench: --strace skipped: " + strace_note)
            ctx.notes.append("strace counts skipped: " + strace_note)
    custom_only = all(getattr(w, "kind", None) for w in workloads)
    use_callgrind = not args.scale and not custom_only and (
        args.callgrind == "on" or (args.callgrind == "auto" and not args.quick))
    if use_callgrind and not shutil.which("valgrind"):
        if args.callgrind == "on":
            log("tsbench: --callgrind on, but valgrind is not installed "
                "(apt-get install -y valgrind)")
        use_callgrind = False

    started = datetime.datetime.now().isoformat(timespec="seconds")
    log("tsbench: %d workload(s) x %d allocator(s) x %d run(s), results in %s" % (
        len(workloads), len(active), args.runs, outdir))
    if args.scale:
        log("tsbench: --scale %d: %s at %s threads" % (
            args.scale, ", ".join(w.name for w in base_workloads if w.threads_arg),
            ", ".join(str(t) for t in sorted({w.scale_threads for w in workloads}))))
    progress = Progress(len(workloads) * len(active) * args.runs, stderr)
    background = BackgroundLoad()
    cells, strace, interrupted = run_workloads(args, workloads, active, ctx, launcher,
                                               strace_note, progress, log)
    callgrind = {}
    if use_callgrind and not interrupted:
        callgrind = run_callgrinds(args, active, ctx, progress)

    summaries = summarize_cells(workloads, active, cells, strace, callgrind, cpu_count)
    ctx.notes.extend(exit_notes(workloads, summaries))
    add_ratios(summaries, allocators, cells, args.baseline, best_of=args.best_of)
    if args.best_of == "all":
        ctx.notes.append("xbest (and the paired ratios) compare with the fastest allocator "
                         "of each workload, of any kind")
    machine = machine_info(allocators, args.repo)
    busy, steal = background.shares(os.cpu_count())
    machine["background_cpu_share"] = busy
    machine["steal_share"] = steal
    add_run_notes(args, ctx.notes, summaries, busy, steal, cpu_count)

    rows, meta, doc = write_results(outdir, args, argv, started, machine, ctx.notes, interrupted,
                                    use_callgrind, allocators, workloads, cells, summaries,
                                    strace, callgrind)
    plots = {} if args.no_plots else make_plots(outdir, summaries, rows, allocators,
                                                workloads, callgrind, log)
    scale_text, scale_files = None, []
    if args.scale:
        scale_text, scale_files, scale_png = report_scale(
            outdir, workloads, summaries, allocators, cpu_count, plots=not args.no_plots)
        plots.update(scale_png)
    report = os.path.join(outdir, "report.html")
    write_html(report, meta, summaries, allocators, workloads, plots, strace, callgrind)

    md = markdown_report(json.loads(json.dumps(doc, default=str)))
    with open(os.path.join(outdir, "results.md"), "w") as f:
        f.write(md)

    log("")
    print_report(log, machine, summaries, allocators, workloads, cpu_count, strace, callgrind,
                 ctx.notes, best_label="xbest" if args.best_of == "all" else "xpeer")
    if not plots and not args.no_plots:
        log("note: no plots (matplotlib is not importable; make bench installs it in .venv)")
    if scale_text:
        log("")
        log(scale_text)
    log("")
    log("report: %s" % report)
    log("data:   %s" % ", ".join(os.path.join(outdir, f) for f in
                                 ("runs.csv", "summary.csv", "results.json", "results.md")))
    if scale_files:
        log("scale:  %s" % ", ".join(scale_files))
    write_markdown_outputs(args, md, log)
    if interrupted:
        return 130
    if args.strict and any(s["status"] in BAD_STATUSES for s in summaries):
        return 1
    return 0
