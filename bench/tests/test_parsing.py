"""Tests of reading what a run printed: a workload's result line
(tsbench.outcome), strace's summary table (tsbench.probes), and times
shown in milliseconds (tsbench.report_text).
"""

import unittest

import tsbench_support  # noqa: F401 (puts bench/ on sys.path)
from tsbench import outcome, probes, report_text


class ParsingTest(unittest.TestCase):
    def test_ok_line_fields_are_typed(self):
        status, fields, reason = outcome.parse_result(
            "lecture1", "noise\nlecture1: threads=32 time_s=0.25 check=123 "
                        "malloc_from=/lib/libc.so.6 ok\n")
        self.assertEqual(status, outcome.OK)
        self.assertEqual(reason, "")
        self.assertEqual(fields["threads"], 32)
        self.assertEqual(fields["time_s"], 0.25)
        self.assertEqual(fields["check"], 123)
        self.assertEqual(fields["malloc_from"], "/lib/libc.so.6")

    def test_failed_line_gives_its_reason(self):
        status, _, reason = outcome.parse_result("memsim", "memsim: FAILED thread 1: lost\n")
        self.assertEqual(status, outcome.FAILED)
        self.assertEqual(reason, "thread 1: lost")

    def test_missing_or_unfinished_line_fails(self):
        self.assertEqual(outcome.parse_result("x", "y: time_s=1 ok\n")[0], outcome.FAILED)
        self.assertEqual(outcome.parse_result("x", "x: time_s=1\n")[0], outcome.FAILED)
        # Another workload's name as a prefix is not this workload's line.
        self.assertEqual(outcome.parse_result("x", "xy: time_s=1 ok\n")[0], outcome.FAILED)

    def test_strace_summary(self):
        text = """% time     seconds  usecs/call     calls    errors syscall
------ ----------- ----------- --------- --------- ----------------
 94.96    2.347314          44     53653     14030 futex
  3.00    0.070000          10      7000           madvise
  1.00    0.010000           5      2000           mmap
------ ----------- ----------- --------- --------- ----------------
100.00    2.427314                 62653     14030 total
"""
        calls = probes.parse_strace_summary(text)
        self.assertEqual(calls["futex"], 53653)
        self.assertEqual(calls["madvise"], 7000)
        self.assertEqual(calls["total"], 62653)

    def test_time_formatting(self):
        self.assertEqual(report_text.fmt_ms(0.25), "250")
        self.assertEqual(report_text.fmt_ms(0.0123), "12.3")
        self.assertEqual(report_text.fmt_ms(0.0000123), "0.012")
        self.assertEqual(report_text.fmt_ms(None), "-")


if __name__ == "__main__":
    unittest.main()
