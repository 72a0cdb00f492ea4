"""tsbench: run the tsalloc workloads against any set of allocators.

Each workload (build/bin/tsb-<name>) runs N times under each allocator,
interleaved (A B C A B C ...), with the allocator chosen by LD_PRELOAD
(glibc: no preload). Every run's result line is checked; a crash, a non-zero
exit, a timeout, a wrong check value or a preload that did not take effect is
reported as such for that cell, never as a time. Medians with min-max go to a
terminal table (with ratios against glibc and against the best peer), CSV,
JSON, PNG plots (when matplotlib is importable) and one self-contained HTML
report. --markdown writes the tables as GitHub markdown, --from-json prints and
writes them again from a saved results.json, and --splice puts the markdown
into a document between <!-- tsbench:table --> markers. --scale N runs
the threaded workloads at 1, 2, 4 ... N threads and reports speed-up
against threads. docs/bench.md describes the options and how to read the
report, docs/bench-workloads.md the workloads.

Only the Python standard library is needed to run and measure.

Modules, lowest first:
  outcome          a run's status and its result line
  workloads        the workload table
  allocators       glibc, the peers, the tsalloc designs, --allocator
  process          running one process (preload, timeout, RSS, launcher)
  probes           strace and callgrind counts
  stats            medians, checks, ratios, paired intervals, --baseline
  machine          the machine and the other work on it
  runner           the interleaved runs, budgets and timeouts
  report_text      cell text shared by the reports
  report_table     the terminal tables
  report_csv_json  runs.csv, summary.csv, results.json (and reading it back)
  report_plot      PNG plots
  report_html      report.html
  report_markdown  markdown tables and --splice
  scale            --scale: thread-count variants, throughput and speed-up
  cli              options and main()

Run it as `python3 bench/tsbench`, `python3 -m tsbench` with bench/ on the
path, or build/bin/tsbench.
"""
