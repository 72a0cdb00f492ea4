"""Running one process: LD_PRELOAD, a timeout that takes the whole process
group down, RSS sampled from /proc while it runs, and CPU times and peak RSS
from wait4. With the launcher (bin/tsbench-exec, bench/runner/) those come
from a process that is not Python, so Python's own RSS is no floor.
"""

import hashlib
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time

from tsbench.outcome import CRASHED, FAILED, OK, TIMEOUT, RunResult


def clean_env(preload=None, extra=None):
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    env.pop("TSALLOC_EXPECT_DESIGN", None)
    if preload:
        env["LD_PRELOAD"] = preload
    env.update(extra or {})
    return env


def signal_name(num):
    try:
        return signal.Signals(num).name
    except ValueError:
        return "signal %d" % num


def read_rss_kb(pid):
    try:
        with open("/proc/%d/statm" % pid) as f:
            return int(f.read().split()[1]) * (os.sysconf("SC_PAGE_SIZE") // 1024)
    except (OSError, ValueError, IndexError):
        return None


def run_process(cmd, timeout, preload=None, launcher=None, sample_rss=False,
                interval=0.01, env=None, stdin=None):
    """Runs cmd with LD_PRELOAD=preload (when given) and the variables of env
    (an allocator's, when given) set, its standard input from the file
    stdin (when given, else inherited), returning (RunResult without
    parsing, stdout, stderr); the result's stdout_sha256 and stdout_len
    describe the output's exact bytes. CPU times and peak RSS come from wait4's
    rusage, taken by the tsbench-exec launcher when there is one (ru_maxrss
    survives exec, so a direct child would report Python's RSS as its floor);
    RSS over time is sampled from /proc while it runs."""
    res = RunResult()
    workdir = tempfile.mkdtemp(prefix="tsbench-")
    report = os.path.join(workdir, "report")
    if launcher:
        full = [launcher, "--report", report] + (["--preload", preload] if preload else []) \
            + ["--"] + list(cmd)
        env = clean_env(extra=env)
    else:
        full, env = list(cmd), clean_env(preload, env)
    try:
        with open(os.path.join(workdir, "out"), "w+b") as out, \
                open(os.path.join(workdir, "err"), "w+b") as err, \
                open(stdin or os.devnull, "rb") as infile:
            t0 = time.perf_counter()
            try:
                proc = subprocess.Popen(full, stdout=out, stderr=err, env=env,
                                        stdin=infile if stdin else None,
                                        start_new_session=True)
            except OSError as e:
                res.status, res.reason = FAILED, "cannot start: %s" % e
                return res, "", ""
            reaped = {}

            def waiter():
                _, status, ru = os.wait4(proc.pid, 0)
                reaped["t"] = time.perf_counter()
                reaped["status"], reaped["ru"] = status, ru

            th = threading.Thread(target=waiter, daemon=True)
            th.start()
            target = None if launcher else proc.pid
            try:
                poll_child(th, proc, t0, timeout, interval, sample_rss, target, report, res)
            except BaseException:  # Ctrl-C: take the child's process group down too
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except OSError:
                    pass
                th.join()
                raise
            timed_out = res.status == TIMEOUT
            res.status = OK
            th.join()
            status, ru = reaped["status"], reaped["ru"]
            proc.returncode = os.waitstatus_to_exitcode(status)  # Popen must not wait again
            res.wall_s = reaped["t"] - t0
            res.user_s, res.sys_s, res.maxrss_kb = ru.ru_utime, ru.ru_stime, ru.ru_maxrss
            res.exit = proc.returncode
            try:  # the process group may hold children that outlived the leader
                os.killpg(proc.pid, signal.SIGKILL)
            except OSError:
                pass
            out.seek(0)
            err.seek(0)
            raw = out.read()
            res.stdout_sha256 = hashlib.sha256(raw).hexdigest()
            res.stdout_len = len(raw)
            stdout = raw.decode(errors="replace")
            stderr = err.read().decode(errors="replace")
        if launcher and not timed_out:
            measured = read_launcher_result(report)
            if measured is None:
                res.status = FAILED
                res.reason = "launcher failed (exit %d): %s" % (res.exit, stderr.strip()[-200:])
                return res, stdout, stderr
            status, res.wall_s, res.user_s, res.sys_s, res.maxrss_kb = measured
            res.exit = os.waitstatus_to_exitcode(status)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    res.stderr_tail = stderr.strip()[-300:]
    if timed_out:
        res.status, res.reason = TIMEOUT, "no result within %.1f s" % timeout
    elif res.exit < 0:
        res.status = CRASHED
        res.reason = "killed by %s" % signal_name(-res.exit)
    elif launcher and res.exit == 127 and "tsbench-exec: cannot run" in stderr:
        res.status, res.reason = FAILED, stderr.strip().splitlines()[-1][:200]
    return res, stdout, stderr


def poll_child(th, proc, t0, timeout, interval, sample_rss, target, report, res):
    """Waits for the waiter thread, sampling RSS and enforcing the timeout
    (marks res.status TIMEOUT after killing the process group)."""
    while th.is_alive():
        now = time.perf_counter() - t0
        if sample_rss:
            if target is None:
                target = read_launcher_pid(report)
            kb = read_rss_kb(target) if target else None
            if kb is not None and th.is_alive():
                res.rss_series.append((round(now, 4), kb))
        if now > timeout and th.is_alive():
            res.status = TIMEOUT
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except OSError:
                pass
            return
        th.join(interval)


def read_launcher_pid(report):
    try:
        with open(report) as f:
            first = f.readline().split()
        return int(first[1]) if len(first) == 2 and first[0] == "pid" else None
    except (OSError, ValueError):
        return None


def read_launcher_result(report):
    """(raw wait status, wall, user, sys, maxrss_kb) from tsbench-exec, or None."""
    try:
        with open(report) as f:
            for line in f:
                p = line.split()
                if len(p) == 10 and p[0] == "status":
                    return (int(p[1]), float(p[3]), float(p[5]), float(p[7]), int(p[9]))
    except (OSError, ValueError):
        pass
    return None


def find_launcher(bindir):
    path = os.path.join(bindir, "tsbench-exec")
    return path if os.access(path, os.X_OK) else None
