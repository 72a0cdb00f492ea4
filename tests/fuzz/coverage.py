#!/usr/bin/env python3
"""Edges reached per source file, from the -print_coverage=1 listing of a
libFuzzer run: lines "COVERED_FUNC: hits: H edges: C/T name file:line" and
"UNCOVERED_FUNC: ...". Prints the files under the given prefix (src/),
with the run's final statistics.

usage: coverage.py <log> <prefix>"""
import collections
import re
import sys

FUNC = re.compile(r"^(UN)?COVERED_FUNC: hits: \d+ edges: (\d+)/(\d+) \S+ (\S+?):\d+")


def main():
    log, prefix = sys.argv[1], sys.argv[2]
    files = collections.defaultdict(lambda: [0, 0])
    stats = []
    with open(log, errors="replace") as f:
        for line in f:
            m = FUNC.match(line)
            if m:
                path = m.group(4)
                if path.startswith(prefix):
                    files[path[len(prefix):]][0] += int(m.group(2))
                    files[path[len(prefix):]][1] += int(m.group(3))
            elif line.startswith("stat::") or line.startswith("Done "):
                stats.append(line.strip())
    reached = sum(c for c, _ in files.values())
    total = sum(t for _, t in files.values())
    print(f"  {'file (src/)':<32} {'edges':>12}")
    for name in sorted(files):
        c, t = files[name]
        print(f"  {name:<32} {c:>5}/{t:<6} {100 * c / t if t else 0:5.1f}%")
    print(f"  {'all of src/':<32} {reached:>5}/{total:<6} {100 * reached / total if total else 0:5.1f}%")
    for s in stats:
        if any(k in s for k in ("number_of_executed_units", "new_units_added", "peak_rss", "Done")):
            print("  " + s)


if __name__ == "__main__":
    main()
