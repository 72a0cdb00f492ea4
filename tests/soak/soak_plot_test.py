#!/usr/bin/env python3
"""soak_plot: soak_plot.py turns a small made-up soak CSV into a PNG with
its three lines drawn, and stops with an error on a CSV that lacks one of
the columns it plots. Runs with the project's virtualenv (make venv) or
the running interpreter, whichever has matplotlib; skipped (exit 77)
where neither has.

usage: soak_plot_test.py <soak_plot.py> <venv dir> <work dir>"""
import os
import subprocess
import sys

HEADER = "seconds,rss_kib,arena,mmapped,in_use,live_bytes,threads_started,forks"

# Pixels of matplotlib's colours C0, C1, C2 in a PNG (run by the python that
# has matplotlib, and so numpy).
COUNT_COLOURS = """
import sys
import matplotlib.image
import numpy
rgb = matplotlib.image.imread(sys.argv[1])[:, :, :3]
for c in ((0x1f, 0x77, 0xb4), (0xff, 0x7f, 0x0e), (0x2c, 0xa0, 0x2c)):
    print(int((abs(rgb - numpy.array(c) / 255).max(axis=2) < 0.1).sum()))
"""


def python_with_matplotlib(venv):
    for py in (os.path.join(venv, "bin", "python"), sys.executable):
        if os.path.exists(py) and subprocess.run(
                [py, "-c", "import matplotlib"], capture_output=True).returncode == 0:
            return py
    return None


def write_csv(path, header, rows):
    with open(path, "w") as f:
        f.write(header + "\n")
        for r in rows:
            f.write(",".join(str(v) for v in r) + "\n")


def main():
    plot, venv, work = sys.argv[1:4]
    py = python_with_matplotlib(venv)
    if py is None:
        print("soak_plot: no python with matplotlib (make venv): skipped")
        return 77
    os.makedirs(work, exist_ok=True)
    rows = [(i + 1.0, 40000 + 100 * (i % 5), 30 << 20, 4 << 20, 20 << 20, 18 << 20, i, i // 3)
            for i in range(30)]
    good, png = os.path.join(work, "plot.csv"), os.path.join(work, "plot.png")
    write_csv(good, HEADER, rows)
    if os.path.exists(png):
        os.remove(png)
    r = subprocess.run([py, plot, good, png], capture_output=True, text=True)
    assert r.returncode == 0, f"soak_plot.py failed: {r.stderr}"
    with open(png, "rb") as f:
        data = f.read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "soak_plot.py wrote no PNG"
    # The three lines, in matplotlib's first three colours: 933 to 1378
    # pixels of each (measured) over 30 samples; 300 is 3x under the least
    # and several times what a legend's sample of the colour alone takes.
    r = subprocess.run([py, "-c", COUNT_COLOURS, png], capture_output=True, text=True)
    assert r.returncode == 0, f"reading {png}: {r.stderr}"
    counts = [int(n) for n in r.stdout.split()]
    assert len(counts) == 3 and min(counts) >= 300, f"pixels of each line's colour: {counts}"
    print(f"soak_plot: {png}: {len(data)} bytes, pixels of each line: {counts}")

    bad = os.path.join(work, "bad.csv")
    write_csv(bad, HEADER.replace("rss_kib,", ""), [r[:1] + r[2:] for r in rows])
    r = subprocess.run([py, plot, bad, os.path.join(work, "bad.png")], capture_output=True,
                       text=True)
    assert r.returncode != 0, "soak_plot.py plotted a CSV without rss_kib"
    print("soak_plot: a CSV without rss_kib is refused")
    return 0


if __name__ == "__main__":
    sys.exit(main())
