#!/usr/bin/env python3
"""tsalloc prof: read a heap profile of tsalloc's profiler (the gperftools
heap-profile text format that TSALLOC_PROF=1 writes) without Go or Perl.

  tsalloc prof FILE [--top N] [--peak] [--base OLD] [--sample inuse_space|
               inuse_objects|alloc_space|alloc_objects] [--stacks N]
               [--focus RE] [--ignore RE] [--lines]
               [--flame OUT.html|OUT.svg] [--collapsed OUT|-]

Prints the functions holding the most (flat: the function that called
malloc; cum: anywhere on the stack), then the top stacks, and with --flame
writes a self-contained flame graph. --peak reads FILE.peak, the profile
of the highest peak. --base OLD subtracts an earlier profile stack by
stack: what grew between the two (two numbered profiles of one process,
from TSALLOC_PROF_SIGNAL or ts_prof_dump), largest growth first, and what
shrank as negative values; the flame graph shows the growth. --focus keeps
the stacks with a function matching a regular expression, --ignore drops
them (pprof's -focus and -ignore). --collapsed writes the stacks as folded
lines ("outermost;...;innermost value"), which flamegraph.pl, inferno and
speedscope read; "-" writes them alone to standard output. Addresses are
symbolised from the ELF symbol tables of the objects listed under
MAPPED_LIBRARIES (no tools needed); --lines adds file:line from addr2line
when it is installed.

Also a module: load(path) gives a Profile whose samples carry function
names (the tests use it).
"""
import argparse
import bisect
import html
import os
import re
import shutil
import struct
import subprocess
import sys

INDEXES = ("inuse_objects", "inuse_space", "alloc_objects", "alloc_space")


class Sample:
    __slots__ = ("values", "addrs", "funcs", "lines", "where")

    def __init__(self, values, addrs):
        self.values = values  # inuse_objects, inuse_space, alloc_objects, alloc_space
        self.addrs = addrs  # innermost first
        self.funcs = []
        self.lines = []
        self.where = []  # per frame: (object, address in it), or the address


class Profile:
    def __init__(self, header, samples, maps):
        self.header = header
        self.samples = samples
        self.maps = maps  # (start, end, offset, path)


def parse(text):
    lines = text.split("\n")
    if not lines or not lines[0].startswith("heap profile:"):
        raise ValueError("not a heap profile (no 'heap profile:' header)")
    header = _numbers(lines[0][len("heap profile:"):].split("@")[0])
    samples, maps, i = [], [], 1
    while i < len(lines) and not lines[i].startswith("MAPPED_LIBRARIES:"):
        line = lines[i].strip()
        i += 1
        if not line:
            continue
        counts, _, stack = line.partition("@")
        addrs = [int(a, 16) for a in stack.split()]
        samples.append(Sample(_numbers(counts), addrs))
    for line in lines[i + 1:]:
        parts = line.split()
        if len(parts) < 6 or "-" not in parts[0]:
            continue
        lo, hi = (int(x, 16) for x in parts[0].split("-"))
        maps.append((lo, hi, int(parts[2], 16), parts[5]))
    return Profile(header, samples, maps)


def _numbers(s):
    v = [int(x) for x in s.replace("[", " ").replace("]", " ").replace(":", " ").split()]
    if len(v) != 4:
        raise ValueError("bad counts: " + s)
    return v


class Elf:
    """The function symbols and load segments of one ELF file."""

    def __init__(self, path):
        self.loads, self.syms = [], []
        with open(path, "rb") as f:
            data = f.read()
        if data[:4] != b"\x7fELF" or data[4] != 2:
            raise ValueError("not a 64-bit ELF file")
        end = "<" if data[5] == 1 else ">"
        (phoff, shoff) = struct.unpack_from(end + "QQ", data, 0x20)
        (phentsize, phnum, shentsize, shnum) = struct.unpack_from(end + "HHHH", data, 0x36)
        for i in range(phnum):
            p_type, _, p_offset, p_vaddr, _, p_filesz = struct.unpack_from(
                end + "IIQQQQ", data, phoff + i * phentsize)
            if p_type == 1:
                self.loads.append((p_offset, p_vaddr, p_filesz))
        sections = [struct.unpack_from(end + "IIQQQQIIQQ", data, shoff + i * shentsize)
                    for i in range(shnum)]
        for sh in sections:
            if sh[1] not in (2, 11):  # SYMTAB, DYNSYM
                continue
            strtab = sections[sh[6]]
            for j in range(sh[5] // 24):
                name, info, _, shndx, value, size = struct.unpack_from(
                    end + "IBBHQQ", data, sh[4] + j * 24)
                if info & 0xF != 2 or not value or not shndx:  # FUNC, defined
                    continue
                s = strtab[4] + name
                self.syms.append((value, size, data[s:data.index(b"\0", s)].decode("utf-8", "replace")))
        self.syms.sort()
        self.starts = [s[0] for s in self.syms]

    def vaddr(self, file_offset):
        for off, va, size in self.loads:
            if off <= file_offset < off + size:
                return file_offset - off + va
        return None

    def function(self, vaddr):
        i = bisect.bisect_right(self.starts, vaddr) - 1
        while i >= 0:
            start, size, name = self.syms[i]
            if vaddr < start + max(size, 1) or size == 0:
                return name
            i -= 1
        return None


class Symbolizer:
    def __init__(self, maps, lines=False):
        self.maps = sorted(maps)
        self.starts = [m[0] for m in self.maps]
        self.elves = {}
        self.lines = lines and shutil.which("addr2line") is not None

    def _elf(self, path):
        if path not in self.elves:
            try:
                self.elves[path] = Elf(path)
            except (OSError, ValueError, struct.error, IndexError):
                self.elves[path] = None
        return self.elves[path]

    def locate(self, addr):
        """(object path, vaddr in the object) of a code address, or None."""
        i = bisect.bisect_right(self.starts, addr) - 1
        if i < 0 or addr >= self.maps[i][1] or not self.maps[i][3].startswith("/"):
            return None
        lo, _, off, path = self.maps[i]
        elf = self._elf(path)
        va = elf.vaddr(addr - lo + off) if elf else None
        return (path, va) if va is not None else None

    def symbolize(self, samples):
        names, where = {}, {}
        for s in samples:
            for k, a in enumerate(s.addrs):
                pc = a - 1  # a return address: the call is just before it
                if pc in names:
                    continue
                loc = self.locate(pc)
                if not loc:
                    names[pc] = "0x%x" % a
                    continue
                name = self._elf(loc[0]).function(loc[1])
                names[pc] = name or "%s+0x%x" % (os.path.basename(loc[0]), loc[1])
                where[pc] = loc
        lines = self._addr2line(where) if self.lines else {}
        names = _demangle(names)
        for s in samples:
            s.funcs = [names[a - 1] for a in s.addrs]
            s.lines = [lines.get(a - 1, "") for a in s.addrs]
            s.where = [where.get(a - 1, a) for a in s.addrs]

    def _addr2line(self, where):
        by_obj, out = {}, {}
        for pc, (path, va) in where.items():
            by_obj.setdefault(path, []).append((pc, va))
        for path, pcs in by_obj.items():
            try:
                r = subprocess.run(["addr2line", "-e", path] + ["0x%x" % va for _, va in pcs],
                                   capture_output=True, text=True, timeout=60)
            except (OSError, subprocess.SubprocessError):
                continue
            for (pc, _), line in zip(pcs, r.stdout.splitlines()):
                if not line.startswith("??"):
                    out[pc] = line.split(" (discriminator")[0]
        return out


def _demangle(names):
    """C++ names through c++filt, when installed (one call for all)."""
    mangled = sorted({n for n in names.values() if n.startswith("_Z")})
    if not mangled or not shutil.which("c++filt"):
        return names
    try:
        r = subprocess.run(["c++filt"], input="\n".join(mangled) + "\n", capture_output=True,
                           text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return names
    plain = dict(zip(mangled, r.stdout.splitlines()))
    return {pc: plain.get(n, n) for pc, n in names.items()}


def load(path, lines=False):
    with open(path, encoding="utf-8", errors="replace") as f:
        prof = parse(f.read())
    Symbolizer(prof.maps, lines).symbolize(prof.samples)
    return prof


def subtract(prof, base):
    """prof less base, stack by stack (both loaded): what each stack gained
    between them, negative where it lost. Stacks match by where each frame
    lies in its object, so profiles of two runs of one program compare too.
    Stacks whose four values did not change are left out."""
    old = {}
    for s in base.samples:
        key = tuple(s.where)
        old[key] = [a + b for a, b in zip(old.get(key, [0, 0, 0, 0]), s.values)]
    samples = []
    for s in prof.samples:
        key = tuple(s.where)
        before = old.pop(key, [0, 0, 0, 0])
        d = Sample([a - b for a, b in zip(s.values, before)], s.addrs)
        d.funcs, d.lines, d.where = s.funcs, s.lines, s.where
        if any(d.values):
            samples.append(d)
    for s in base.samples:  # gone since: every block freed
        if tuple(s.where) in old:
            d = Sample([-v for v in old.pop(tuple(s.where))], s.addrs)
            d.funcs, d.lines, d.where = s.funcs, s.lines, s.where
            if any(d.values):
                samples.append(d)
    header = [a - b for a, b in zip(prof.header, base.header)]
    return Profile(header, samples, prof.maps)


def select(prof, focus=None, ignore=None):
    """The samples with a function matching the regular expression focus
    (all when None), less those with one matching ignore."""
    f = re.compile(focus) if focus else None
    i = re.compile(ignore) if ignore else None
    samples = [s for s in prof.samples
               if (not f or any(f.search(fn) for fn in s.funcs)) and
               not (i and any(i.search(fn) for fn in s.funcs))]
    return Profile(prof.header, samples, prof.maps)


def collapsed(prof, index):
    """Folded stacks: 'outermost;...;innermost value' per distinct stack of
    functions with a positive value, largest first (';' in a name becomes
    ':', the separator's only meaning)."""
    folded = {}
    for s in prof.samples:
        key = ";".join(fn.replace(";", ":") for fn in reversed(s.funcs))
        folded[key] = folded.get(key, 0) + s.values[index]
    rows = sorted(((v, k) for k, v in folded.items() if v > 0), key=lambda r: (-r[0], r[1]))
    return ["%s %d" % (k, v) for v, k in rows]


def by_function(prof, index):
    """{function: [flat, cum]} for value `index` (0..3, INDEXES)."""
    table = {}
    for s in prof.samples:
        v = s.values[index]
        for k, fn in enumerate(s.funcs):
            e = table.setdefault(fn, [0, 0])
            if k == 0:
                e[0] += v
            if fn not in s.funcs[:k]:
                e[1] += v
    return table


def _human(v, space):
    if not space:
        return str(v)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(v) < 1024 or unit == "GiB":
            return ("%d %s" % (v, unit)) if unit == "B" else ("%.2f %s" % (v, unit))
        v /= 1024.0
    return str(v)


def report(prof, index, top, stacks, out=sys.stdout):
    space = index in (1, 3)
    net = sum(s.values[index] for s in prof.samples)
    # Shares are of what the stacks hold; of a difference (subtract),
    # of what grew, and the net change is said too.
    total = sum(s.values[index] for s in prof.samples if s.values[index] > 0)
    out.write("%s: %s in total, %d stacks%s\n\n" % (
        INDEXES[index], _human(total, space), len(prof.samples),
        "" if net == total else " (%s shrank: net %s)" % (_human(total - net, space),
                                                          _human(net, space))))
    out.write("%12s %6s %12s %6s  %s\n" % ("flat", "flat%", "cum", "cum%", "function"))
    rows = sorted(by_function(prof, index).items(), key=lambda kv: (-kv[1][0], -kv[1][1]))
    for fn, (flat, cum) in rows[:top]:
        pct = lambda x: 100.0 * x / total if total else 0.0
        out.write("%12s %5.1f%% %12s %5.1f%%  %s\n" % (_human(flat, space), pct(flat),
                                                      _human(cum, space), pct(cum), fn))
    ranked = sorted(prof.samples, key=lambda s: -s.values[index])
    for s in ranked[:stacks]:
        if s.values[index] <= 0:
            break
        out.write("\n%s (%.1f%%) in %d objects, allocated from:\n" % (
            _human(s.values[index], space), 100.0 * s.values[index] / total if total else 0,
            s.values[0] if index < 2 else s.values[2]))
        for k, fn in enumerate(s.funcs):
            line = s.lines[k] if s.lines else ""
            out.write("    #%d 0x%x %s%s\n" % (k, s.addrs[k], fn, "  " + line if line else ""))


def _flame_tree(prof, index):
    root = {"name": "all", "value": 0, "kids": {}}
    for s in prof.samples:
        v = s.values[index]
        if v <= 0:
            continue
        root["value"] += v
        node = root
        for fn in reversed(s.funcs):  # outermost first
            node = node["kids"].setdefault(fn, {"name": fn, "value": 0, "kids": {}})
            node["value"] += v
    return root


def flame_svg(prof, index, title):
    """A flame graph as SVG text: one box per function on a stack, as wide as
    its share; hover shows the value."""
    root = _flame_tree(prof, index)
    width, row = 1200.0, 18
    space = index in (1, 3)
    boxes, depth_max = [], 0

    def walk(node, x, depth):
        nonlocal depth_max
        depth_max = max(depth_max, depth)
        w = width * node["value"] / root["value"] if root["value"] else 0
        boxes.append((x, depth, w, node))
        for kid in sorted(node["kids"].values(), key=lambda n: n["name"]):
            walk(kid, x, depth + 1)
            x += width * kid["value"] / root["value"]

    if root["value"]:
        walk(root, 0.0, 0)
    height = (depth_max + 1) * row + 40
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" '
           'font-family="monospace" font-size="11">' % (width, height),
           '<text x="4" y="14" font-size="13">%s</text>' % html.escape(title)]
    for x, depth, w, node in boxes:
        if w < 0.5:
            continue
        y = height - (depth + 1) * row
        h = hash(node["name"]) & 0xFFFF
        color = "rgb(%d,%d,%d)" % (205 + h % 50, 80 + (h >> 4) % 120, 40 + (h >> 8) % 40)
        pct = 100.0 * node["value"] / root["value"]
        label = "%s: %s (%.2f%%)" % (node["name"], _human(node["value"], space), pct)
        out.append('<g><title>%s</title><rect x="%.1f" y="%d" width="%.1f" height="%d" '
                   'fill="%s" stroke="white" stroke-width="0.5"/>' % (
                       html.escape(label), x, y, w, row - 1, color))
        chars = int(w / 7)
        if chars >= 3:
            name = node["name"] if len(node["name"]) <= chars else node["name"][:chars - 2] + ".."
            out.append('<text x="%.1f" y="%d">%s</text>' % (x + 2, y + row - 5, html.escape(name)))
        out.append("</g>")
    out.append("</svg>")
    return "\n".join(out)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="tsalloc prof", description=__doc__.split("\n\n")[0])
    ap.add_argument("file")
    ap.add_argument("--top", type=int, default=10, help="functions to list (default 10)")
    ap.add_argument("--stacks", type=int, default=3, help="top stacks to print (default 3)")
    ap.add_argument("--peak", action="store_true", help="read FILE.peak, the peak profile")
    ap.add_argument("--base", metavar="OLD", help="subtract an earlier profile: what grew since")
    ap.add_argument("--sample", choices=INDEXES, default="inuse_space")
    ap.add_argument("--lines", action="store_true", help="file:line with addr2line")
    ap.add_argument("--flame", metavar="OUT", help="write a flame graph (.svg or .html)")
    ap.add_argument("--collapsed", metavar="OUT",
                    help="write folded stacks (flamegraph.pl's input; '-': standard output)")
    ap.add_argument("--focus", metavar="RE", help="only stacks with a function matching RE")
    ap.add_argument("--ignore", metavar="RE", help="no stacks with a function matching RE")
    args = ap.parse_args(argv)
    path = args.file + ".peak" if args.peak and not args.file.endswith(".peak") else args.file
    for pattern in (args.focus, args.ignore):
        try:
            re.compile(pattern or "")
        except re.error as e:
            print("tsalloc prof: %s: %s" % (pattern, e), file=sys.stderr)
            return 2
    profs = []
    for p in [path] + ([args.base] if args.base else []):
        try:
            profs.append(load(p, args.lines))
        except (OSError, ValueError) as e:
            print("tsalloc prof: %s: %s" % (p, e), file=sys.stderr)
            return 2
    prof, base = profs[0], profs[1] if args.base else None
    title = "%s: %s" % (os.path.basename(path), args.sample)
    quiet = args.collapsed == "-"  # the folded lines alone, for a pipe
    if base:
        prof = subtract(prof, base)
        title += " since %s" % os.path.basename(args.base)
        if not quiet:
            print("%s less %s: what grew in between\n" % (path, args.base))
    if args.focus or args.ignore:
        prof = select(prof, args.focus, args.ignore)
        title += "".join(" %s %s" % (k, v) for k, v in (("focus", args.focus),
                                                         ("ignore", args.ignore)) if v)
    index = INDEXES.index(args.sample)
    if args.collapsed:
        text = "".join(line + "\n" for line in collapsed(prof, index))
        if quiet:
            sys.stdout.write(text)
        else:
            with open(args.collapsed, "w", encoding="utf-8") as f:
                f.write(text)
    if not quiet:
        report(prof, index, args.top, args.stacks)
    if args.flame:
        svg = flame_svg(prof, index, title)
        with open(args.flame, "w", encoding="utf-8") as f:
            if args.flame.endswith(".svg"):
                f.write(svg + "\n")
            else:
                f.write("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>%s</title>"
                        "</head><body>\n%s\n</body></html>\n" % (html.escape(path), svg))
    if not quiet:
        if args.flame:
            print("\nflame graph: %s" % args.flame)
        if args.collapsed:
            print("folded stacks: %s" % args.collapsed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
