"""The machine the runs measured: CPU, cores, memory, kernel, glibc and the
allocators' versions, and how much of the CPUs other work took meanwhile
(other processes, and a virtual machine's host giving time to other guests).
"""

import os
import platform
import resource
import shutil
import subprocess
import time

from tsbench.allocators import PEERS


class BackgroundLoad:
    """How much of the machine's CPU other processes used while tsbench ran:
    the busy time /proc/stat counts for all CPUs, minus tsbench's own and its
    children's (the runs) CPU time, over the elapsed time times the cores.
    The steal share is the time a virtual machine's host gave to other
    guests, which the guest cannot see as busy."""

    def __init__(self):
        self.start = self.sample()

    @staticmethod
    def sample():
        try:
            with open("/proc/stat") as f:
                fields = [int(v) for v in f.readline().split()[1:]]
        except (OSError, ValueError):
            return None
        hz = os.sysconf("SC_CLK_TCK")
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
        steal = fields[7] if len(fields) > 7 else 0  # time the host gave to others
        busy = (sum(fields[:8]) - idle - steal) / hz
        own = 0.0
        for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
            ru = resource.getrusage(who)
            own += ru.ru_utime + ru.ru_stime
        return time.time(), busy, own, steal / hz

    def shares(self, cpus):
        """(other processes' share, other guests' share) of the CPUs since
        the start, each 0..1, or (None, None) when unknown."""
        end = self.sample()
        if self.start is None or end is None or not cpus or end[0] <= self.start[0]:
            return None, None
        capacity = (end[0] - self.start[0]) * cpus
        others = (end[1] - self.start[1]) - (end[2] - self.start[2])
        steal = end[3] - self.start[3]
        return (max(0.0, min(1.0, others / capacity)), max(0.0, min(1.0, steal / capacity)))


BUSY_SHARE = 0.10  # above this, the report says other work competed with the runs


def machine_info(allocators, repo):
    info = {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
            "kernel": platform.release(), "os": "", "glibc": "", "memory_gb": None,
            "python": platform.python_version(), "tsalloc": ""}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    info["cpu"] = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        info["usable_cores"] = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        info["usable_cores"] = os.cpu_count()
    try:
        with open("/proc/meminfo") as f:
            kb = int(f.readline().split()[1])
            info["memory_gb"] = round(kb / 1024 / 1024, 1)
    except (OSError, ValueError, IndexError):
        pass
    try:
        info["glibc"] = os.confstr("CS_GNU_LIBC_VERSION")
    except (ValueError, OSError):
        info["glibc"] = " ".join(platform.libc_ver())
    try:
        with open("/etc/os-release") as f:
            for line in f:
                if line.startswith("PRETTY_NAME="):
                    info["os"] = line.split("=", 1)[1].strip().strip('"')
    except OSError:
        pass
    try:
        rev = subprocess.run(["git", "-C", repo, "describe", "--always", "--dirty"],
                             capture_output=True, text=True, timeout=10)
        if rev.returncode == 0:
            info["tsalloc"] = "git " + rev.stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        pass
    packages = {name: pkg for name, _, pkg in PEERS}
    for a in allocators:
        if not a.available:
            continue
        if a.kind == "system":
            a.version = info["glibc"]
        elif a.kind == "tsalloc":
            a.version = "tsalloc " + (info["tsalloc"] or "(this tree)")
        elif a.kind == "peer":
            a.version = os.path.basename(os.path.realpath(a.path))
            if shutil.which("dpkg-query"):
                p = subprocess.run(["dpkg-query", "-W", "-f", "${Version}", packages[a.name]],
                                   capture_output=True, text=True)
                if p.returncode == 0 and p.stdout.strip():
                    a.version = "%s %s" % (packages[a.name], p.stdout.strip())
        else:
            a.version = os.path.basename(os.path.realpath(a.path))
    return info
