"""Counts beside the times: system calls and futex calls of one extra run
under strace -f -c (--strace), and instructions per malloc/free pair of
fastpath under callgrind (--callgrind), counted inside its loop only.
"""

import glob
import os
import shutil
import subprocess

from tsbench.outcome import OK
from tsbench.process import run_process


def parse_strace_summary(text):
    """strace -c table -> {syscall: calls, 'total': sum}. Columns: % time,
    seconds, usecs/call, calls, [errors], syscall; the total row is summed
    here, since its layout differs between strace versions."""
    calls = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 5 or parts[-1] == "total":
            continue
        try:
            float(parts[0])
            calls[parts[-1]] = int(parts[3])
        except ValueError:
            continue
    calls["total"] = sum(calls.values())
    return calls


def run_strace(wl, alloc, bindir, extra_args, timeout, workdir):
    os.makedirs(os.path.join(workdir, "strace"), exist_ok=True)
    out = os.path.join(workdir, "strace", "%s.%s.txt" % (wl.name, alloc.name))
    cmd = ["strace", "-f", "-c", "-o", out]
    if alloc.path:
        cmd += ["-E", "LD_PRELOAD=" + alloc.path]
    for var, value in sorted(alloc.env.items()):
        cmd += ["-E", "%s=%s" % (var, value)]
    cmd += [wl.binary(bindir)] + extra_args
    res, stdout, _ = run_process(cmd, timeout)
    if res.status != OK or res.exit != 0:
        return {"error": res.reason or "exit %s" % res.exit}
    try:
        with open(out) as f:
            calls = parse_strace_summary(f.read())
    except OSError as e:
        return {"error": str(e)}
    return {"syscalls": calls.get("total"), "futex": calls.get("futex", 0),
            "calls": calls}


def strace_usable():
    if not shutil.which("strace"):
        return "strace is not installed (apt-get install -y strace)"
    try:
        p = subprocess.run(["strace", "-f", "-c", "-o", os.devnull, "true"],
                           capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        return "strace does not run: %s" % e
    if p.returncode != 0:
        return "strace cannot trace here: " + p.stderr.decode(errors="replace").strip()[-160:]
    return None


CALLGRIND_ITERS = 20000


def run_callgrind(alloc, bindir, workdir, sizes="16,64,256,1024,4096,32768,262144"):
    """Instructions per malloc/free pair of fastpath, one callgrind dump per size."""
    binary = os.path.join(bindir, "tsb-fastpath")
    os.makedirs(os.path.join(workdir, "callgrind"), exist_ok=True)
    prefix = os.path.join(workdir, "callgrind", "fastpath.%s" % alloc.name)
    for old in glob.glob(prefix + ".*"):
        os.unlink(old)
    cmd = ["valgrind", "--tool=callgrind", "--callgrind-out-file=%s.%%p" % prefix,
           "--collect-atstart=no", "--toggle-collect=tsb_pair_loop",
           "--dump-after=tsb_pair_loop", binary, "--iters", str(CALLGRIND_ITERS),
           "--warmup", "1000", "--sizes", sizes]
    res, stdout, stderr = run_process(cmd, 300, preload=alloc.path, env=alloc.env)
    if res.status != OK or res.exit != 0:
        return {"error": res.reason or "valgrind exit %s: %s" % (res.exit, stderr[-160:])}
    parts = []
    for path in glob.glob(prefix + ".*"):
        part, totals, trigger = None, None, False
        with open(path, errors="replace") as f:
            for line in f:
                if line.startswith("part:"):
                    part = int(line.split()[1])
                elif line.startswith("desc: Trigger:") and "dump-after" in line:
                    trigger = True
                elif line.startswith("totals:") or line.startswith("summary:"):
                    totals = int(line.split()[1])
        if trigger and part is not None and totals is not None:
            parts.append((part, totals))
    parts.sort()
    size_list = [int(s) for s in sizes.split(",")]
    if len(parts) != len(size_list):
        return {"error": "expected %d callgrind dumps, found %d" % (len(size_list), len(parts))}
    return {"instr_per_pair": {str(s): round(t / CALLGRIND_ITERS, 1)
                               for s, (_, t) in zip(size_list, parts)}}
