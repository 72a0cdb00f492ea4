#!/usr/bin/env python3
"""Plots a soak CSV (tests/soak/soak.c): RSS, committed memory (arena +
mmapped) and the live bytes of the load over time.

usage: soak_plot.py <csv> <png>"""
import csv
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    with open(sys.argv[1]) as f:
        rows = list(csv.DictReader(f))
    t = [float(r["seconds"]) for r in rows]
    mib = 1024 * 1024
    fig, ax = plt.subplots(figsize=(8, 4))
    ax.plot(t, [int(r["rss_kib"]) * 1024 / mib for r in rows], label="RSS")
    ax.plot(t, [(int(r["arena"]) + int(r["mmapped"])) / mib for r in rows], label="committed")
    ax.plot(t, [int(r["live_bytes"]) / mib for r in rows], label="live bytes of the load")
    ax.set_xlabel("seconds")
    ax.set_ylabel("MiB")
    ax.set_ylim(bottom=0)
    ax.set_title(sys.argv[1].rsplit("/", 1)[-1].removesuffix(".csv"))
    ax.legend()
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=100)


if __name__ == "__main__":
    main()
