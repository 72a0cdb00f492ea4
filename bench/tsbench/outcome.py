"""What one run of a workload gave: its status and its measurements.

A run or a cell is OK, FAILED, CRASHED, TIMEOUT, WRONG (a check value that
disagrees with the reference) or SKIPPED; only an OK one carries a time.
Every workload prints one result line, '<name>: key=value ... ok', which
parse_result turns into typed fields.
"""


# Run and cell statuses; only OK carries a time.
OK, FAILED, CRASHED, TIMEOUT, WRONG = "ok", "failed", "crashed", "timeout", "wrong"
SKIPPED = "skipped"
BAD_STATUSES = (FAILED, CRASHED, TIMEOUT, WRONG)


class RunResult:
    """One run: its status and reason, the process's times and peak RSS, the
    fields of its result line, and RSS samples over time."""

    def __init__(self):
        self.status = OK
        self.reason = ""
        self.wall_s = None
        self.user_s = None
        self.sys_s = None
        self.maxrss_kb = None
        self.exit = None
        self.fields = {}
        self.rss_series = []    # (seconds since start, KiB)
        self.stderr_tail = ""
        self.stdout_sha256 = None
        self.stdout_len = None

    def time_s(self):
        t = self.fields.get("time_s")
        return t if isinstance(t, (int, float)) else self.wall_s


def parse_value(text):
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return text


def parse_result(name, stdout):
    """Finds '<name>: ...' lines. Returns (status, fields, reason) where status is
    OK for a line ending in ' ok', FAILED for 'FAILED why' or no line at all."""
    last = None
    for line in stdout.splitlines():
        if line.startswith(name + ":"):
            last = line[len(name) + 1:].strip()
            if last.startswith("FAILED"):
                return FAILED, {}, last[len("FAILED"):].strip() or "workload reported FAILED"
    if last is None:
        return FAILED, {}, "no result line '%s: ... ok'" % name
    tokens = last.split()
    if not tokens or tokens[-1] != "ok":
        return FAILED, {}, "result line does not end in 'ok': " + last[:120]
    fields = {}
    for tok in tokens[:-1]:
        if "=" in tok:
            k, v = tok.split("=", 1)
            fields[k] = parse_value(v)
    return OK, fields, ""
