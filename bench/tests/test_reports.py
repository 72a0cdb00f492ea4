"""Tests of the markdown report (tsbench.report_markdown): its header line
and tables from a results.json document, and --splice between the
<!-- tsbench:table --> markers.
"""

import os
import stat
import tempfile
import unittest

from tsbench_support import fake_results, md_tables
from tsbench import outcome, report_markdown


class MarkdownTest(unittest.TestCase):
    def setUp(self):
        self.doc = fake_results()
        self.md = report_markdown.markdown_report(self.doc)
        self.tables = md_tables(self.md)

    def test_header_line_states_machine_date_runs_and_oversubscription(self):
        first = self.md.splitlines()[0]
        for text in ("Test CPU 9000", "2 cores", "kernel 6.1.0-test", "glibc 2.36",
                     "2025-03-04", "median of 3 per cell", "above 2", "oversubscribe"):
            self.assertIn(text, first)
        self.assertNotIn("Quick mode", first)
        self.doc["config"]["quick"] = True
        self.assertIn("Quick mode", report_markdown.markdown_report(self.doc).splitlines()[0])

    def test_tables_are_rectangular(self):
        self.assertEqual(len(self.tables), 3)  # time, peak RSS, instructions
        for t in self.tables:
            self.assertTrue(all(len(row) == len(t[0]) for row in t), t)
        aligns = [l for l in self.md.splitlines() if l.startswith("|:---")]
        self.assertEqual(aligns[0], "|:---|---:|---:|---:|---:|---:|---:|")

    def test_time_table(self):
        header, rows = self.tables[0][0], {r[0]: r for r in self.tables[0][1:]}
        self.assertEqual(header, ["workload", "threads", "glibc", "jemalloc", "tsalloc",
                                  "bestfit", "pow2"])  # tcmalloc is missing: no column
        self.assertEqual(rows["lecture1"], ["lecture1", "32*", "0.100", "0.0500 (0.50)",
                                            "0.0800 (0.80)", "TIMEOUT", "CRASHED"])
        self.assertEqual(rows["collatz-list"], ["collatz-list", "1", "0.100", "0.0500 (0.50)",
                                                "0.0800 (0.80)", "2.50 (25.00)", "WRONG"])
        self.assertEqual(rows["fastpath"][4], "FAILED")
        # geomean over the ok cells only, saying how many of them there were
        self.assertEqual(rows["geomean vs glibc"],
                         ["geomean vs glibc", "", "1.00", "0.50", "0.80 (2 of 3)",
                          "25.00 (2 of 3)", "3.00 (1 of 3)"])

    def test_rss_table(self):
        header, rows = self.tables[1][0], {r[0]: r for r in self.tables[1][1:]}
        self.assertEqual(header[:3], ["workload", "threads", "glibc"])
        self.assertEqual(rows["lecture1"], ["lecture1", "32*", "2.0", "3.0 (1.50)",
                                            "3.0 (1.50)", "TIMEOUT", "CRASHED"])

    def test_instructions_table(self):
        t = self.tables[2]
        self.assertEqual(t[0], ["allocator", "16 B", "64 B"])
        self.assertEqual(t[1], ["glibc", "145", "146"])
        self.assertEqual(t[2], ["tsalloc", "20", "21"])
        self.assertEqual(t[3], ["pow2", "error: valgrind exit 1", "-"])
        del self.doc["callgrind"]
        self.assertEqual(len(md_tables(report_markdown.markdown_report(self.doc))), 2)

    def test_end_rss_table(self):
        # Only workloads whose runs report rss_end_kb get a row; failed cells stay empty.
        for c in self.doc["summary"]:
            if c["workload"] == "collatz-list" and c["status"] == outcome.OK:
                c["extra"]["rss_end_kb"] = {"glibc": 4096, "jemalloc": 2048}.get(
                    c["allocator"], 1024)
        md = report_markdown.markdown_report(self.doc)
        self.assertIn("**Resident at the end:**", md)
        t = md_tables(md)[2]
        self.assertEqual(t[0], ["workload", "glibc", "jemalloc", "tsalloc", "bestfit", "pow2"])
        self.assertEqual(t[1:], [["collatz-list", "4.0", "2.0 (0.50)", "1.0 (0.25)",
                                  "1.0 (0.25)", ""]])
        self.assertNotIn("Resident at the end", self.md)  # no workload reports it

    def test_failures_and_notes_are_listed(self):
        self.assertIn("- `lecture1` on `bestfit`: TIMEOUT: 3 of 3 runs: no result within 3.0 s",
                      self.md)
        self.assertIn("- `collatz-list` on `pow2`: WRONG: 3 of 3 runs: check=1, expected 2 "
                      "(glibc)", self.md)
        self.assertIn("FAILED: 3 of 3 runs: exit 1: a\\|b", self.md)  # a | in a reason is escaped
        self.assertIn("- memsim replays memsim.trace", self.md)
        self.assertNotIn("- workloads with more threads", self.md)  # the header says it

    def test_significant_digits(self):
        self.assertEqual(report_markdown.fmt_sig(0.26), "0.260")
        self.assertEqual(report_markdown.fmt_sig(7.994), "7.99")
        self.assertEqual(report_markdown.fmt_sig(12.34), "12.3")
        self.assertEqual(report_markdown.fmt_sig(1234.5), "1234")
        self.assertEqual(report_markdown.fmt_sig(0.000123), "0.000123")
        self.assertEqual(report_markdown.fmt_sig(None), "-")


class SpliceTest(unittest.TestCase):
    MD = "| a | b |\n|:---|---:|\n| x | 1 |\n"
    DOCS = {
        "none": "# Title\n\nSome text.\n",
        "open": "# T\n\n## Measured\n\n<!-- tsbench:table -->\n\n## Next\nmore\n",
        "both": "# T\n\n<!-- tsbench:table -->\nold table\n<!-- /tsbench:table -->\ntail\n",
    }

    def test_without_markers_both_are_appended(self):
        out = report_markdown.splice_markdown(self.DOCS["none"], self.MD)
        self.assertTrue(out.startswith(self.DOCS["none"]))
        self.assertTrue(out.endswith("<!-- tsbench:table -->\n\n" + self.MD +
                                     "\n<!-- /tsbench:table -->\n"))

    def test_after_the_opening_marker_and_closed(self):
        out = report_markdown.splice_markdown(self.DOCS["open"], self.MD)
        self.assertEqual(out, "# T\n\n## Measured\n\n<!-- tsbench:table -->\n\n" + self.MD +
                         "\n<!-- /tsbench:table -->\n\n## Next\nmore\n")

    def test_between_markers_is_replaced(self):
        out = report_markdown.splice_markdown(self.DOCS["both"], self.MD)
        self.assertEqual(out, "# T\n\n<!-- tsbench:table -->\n\n" + self.MD +
                         "\n<!-- /tsbench:table -->\ntail\n")
        self.assertNotIn("old table", out)

    def test_idempotent(self):
        for name, doc in self.DOCS.items():
            once = report_markdown.splice_markdown(doc, self.MD)
            self.assertEqual(report_markdown.splice_markdown(once, self.MD), once, name)
            other = report_markdown.splice_markdown(once, "something else\n")
            self.assertEqual(other.count("<!-- tsbench:table -->"), 1, name)
            self.assertEqual(report_markdown.splice_markdown(other, self.MD), once, name)

    def test_markers_only_count_on_lines_of_their_own(self):
        doc = "Put `<!-- tsbench:table -->` in a doc.\n"
        out = report_markdown.splice_markdown(doc, self.MD)
        self.assertTrue(out.startswith(doc + "\n<!-- tsbench:table -->\n"))

    def test_closing_marker_alone_is_an_error(self):
        with self.assertRaises(ValueError):
            report_markdown.splice_markdown("a\n<!-- /tsbench:table -->\nb\n", self.MD)

    def test_file(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "doc.md")
            with open(path, "w") as f:
                f.write(self.DOCS["open"])
            os.chmod(path, 0o640)
            self.assertTrue(report_markdown.splice_file(path, self.MD))
            self.assertFalse(report_markdown.splice_file(path, self.MD))
            self.assertEqual(stat.S_IMODE(os.stat(path).st_mode), 0o640)
            self.assertEqual(os.listdir(d), ["doc.md"])


if __name__ == "__main__":
    unittest.main()
