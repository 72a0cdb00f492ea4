"""PNG plots of a run (when matplotlib is importable): time relative to
glibc, time and peak RSS per workload, RSS over time, and instructions per
malloc/free pair. The HTML report embeds them.
"""

import os

from tsbench.outcome import OK, SKIPPED
from tsbench.report_text import short_status


def make_plots(outdir, summaries, rows, allocators, workloads, callgrind, log):
    """Returns {title: png path}; {} without matplotlib."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        import matplotlib.ticker
    except ImportError:
        return {}
    plots = {}
    names = [a.name for a in allocators if a.available]
    by_key = {(s["workload"], s["allocator"]): s for s in summaries}
    wls = [w.name for w in workloads
           if any(by_key.get((w.name, n), {}).get("status", SKIPPED) != SKIPPED for n in names)]
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    color = {n: colors[i % len(colors)] for i, n in enumerate(names)}
    os.makedirs(os.path.join(outdir, "plots"), exist_ok=True)

    def save(fig, name, title):
        path = os.path.join(outdir, "plots", name)
        fig.savefig(path, dpi=90, bbox_inches="tight")
        plt.close(fig)
        plots[title] = path

    try:
        # 1. time relative to glibc, all workloads
        if wls:
            fig, ax = plt.subplots(figsize=(max(8, len(wls) * 1.1), 4.5))
            w = 0.8 / max(1, len(names))
            for i, n in enumerate(names):
                xs, ys = [], []
                for j, wl in enumerate(wls):
                    c = by_key.get((wl, n))
                    x = j + (i - len(names) / 2 + 0.5) * w
                    if c and c["status"] == OK and c["ratio_glibc"]:
                        xs.append(x)
                        ys.append(c["ratio_glibc"])
                    elif c and c["status"] != OK:
                        ax.text(x, 1.0, short_status(c["status"]), ha="center", va="bottom",
                                fontsize=7, color="red")
                ax.bar(xs, ys, w, label=n, color=color[n])
            ax.axhline(1.0, color="black", linewidth=0.6)
            ax.set_yscale("log")
            plain = matplotlib.ticker.FuncFormatter(lambda v, _: "%g" % v)
            ax.yaxis.set_major_formatter(plain)
            ax.yaxis.set_minor_formatter(plain)
            ax.tick_params(axis="y", which="minor", labelsize=7)
            ax.set_xticks(range(len(wls)))
            ax.set_xticklabels(wls, rotation=30, ha="right")
            ax.set_ylabel("median time / glibc (log; lower is better)")
            ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
            ax.set_title("Time relative to glibc (red letters: T timeout, C crash, F fail, "
                         "W wrong)", fontsize=9)
            save(fig, "time_ratio.png", "Time relative to glibc")

        # 2 and 3. absolute time and peak RSS per workload, min-max as error bars
        for metric, scale, ylabel, fname, title in (
                ("time_s", 1000.0, "ms", "time.png", "Time per workload (median, min-max)"),
                ("maxrss_kb", 1 / 1024, "MiB", "peak_rss.png", "Peak RSS per workload")):
            if not wls:
                break
            cols = 4
            rws = (len(wls) + cols - 1) // cols
            fig, axes = plt.subplots(rws, cols, figsize=(cols * 3.4, rws * 2.6), squeeze=False)
            for k, wl in enumerate(wls):
                ax = axes[k // cols][k % cols]
                for i, n in enumerate(names):
                    c = by_key.get((wl, n))
                    if not c:
                        continue
                    if c["status"] != OK or c[metric] is None:
                        ax.text(i, 0, short_status(c["status"]), ha="center", va="bottom",
                                color="red", fontsize=8)
                        continue
                    v = c[metric] * scale
                    lo = (c.get(metric + "_min") or c[metric]) * scale
                    hi = (c.get(metric + "_max") or c[metric]) * scale
                    ax.bar(i, v, color=color[n], yerr=[[v - lo], [hi - v]], capsize=2)
                ax.set_title(wl, fontsize=9)
                ax.set_xticks(range(len(names)))
                ax.set_xticklabels(names, rotation=60, ha="right", fontsize=7)
                ax.set_ylabel(ylabel, fontsize=8)
                ax.tick_params(axis="y", labelsize=7)
            for k in range(len(wls), rws * cols):
                axes[k // cols][k % cols].axis("off")
            fig.tight_layout()
            save(fig, fname, title)

        # 4. RSS over time, first ok run of each allocator
        for wl in workloads:
            if not wl.rss_series:
                continue
            series = {}
            for row in rows:
                if row["workload"] == wl.name and row["status"] == OK and row["rss_series"] \
                        and row["allocator"] not in series:
                    series[row["allocator"]] = row["rss_series"]
            if not series:
                continue
            fig, ax = plt.subplots(figsize=(8, 4))
            for n in names:
                if n in series:
                    ts = [p[0] for p in series[n]]
                    ax.plot(ts, [p[1] / 1024 for p in series[n]], ".-", markersize=3,
                            label=n, color=color[n])
            ax.set_xlabel("seconds since start")
            ax.set_ylabel("RSS MiB")
            ax.legend(fontsize=7)
            ax.set_title("%s: RSS over time (sampled from /proc, first run)" % wl.name,
                         fontsize=9)
            save(fig, "rss_%s.png" % wl.name, "RSS over time: " + wl.name)

        # 5. instructions per pair
        if callgrind:
            ok = {n: v["instr_per_pair"] for n, v in callgrind.items() if "instr_per_pair" in v}
            if ok:
                sizes = list(next(iter(ok.values())).keys())
                fig, ax = plt.subplots(figsize=(8, 4))
                w = 0.8 / len(ok)
                for i, n in enumerate(n for n in names if n in ok):
                    xs = [j + (i - len(ok) / 2 + 0.5) * w for j in range(len(sizes))]
                    ax.bar(xs, [ok[n][s] for s in sizes], w, label=n, color=color[n])
                ax.set_xticks(range(len(sizes)))
                ax.set_xticklabels(["%s B" % s for s in sizes])
                ax.set_ylabel("instructions per malloc/free pair")
                ax.legend(fontsize=7)
                ax.set_title("fastpath under callgrind (lower is better)", fontsize=9)
                save(fig, "instructions.png", "Instructions per malloc/free pair")
    except Exception as e:  # a plotting problem must not lose the measurements
        log("tsbench: plotting failed: %s" % e)
    return plots
