#!/usr/bin/env python3
"""Checks the library's layering and that only src/os/ talks to the kernel.

Layers, lowest first (a file may include headers of its own layer and of
the layers below it, never above):

    os  <-  base  <-  core, designs  <-  override

- src/os/ includes nothing of the project but itself;
- src/base/ includes os/ and base/;
- src/core/ includes os/, base/, core/, the public headers (include/) and
  the design contract (the headers at src/designs/*.h: design.h, family.h),
  which the fast allocator implements like every design;
- src/designs/ includes os/, base/, the contract, its own folder and the
  public headers; one design includes another's folder only where it is
  built on it (DESIGN_USES: bestfit-tls on bestfit's fit heap, the classic
  library on both);
- src/override/ may include every layer;
- the public headers (include/) include no header of src/.

Memory system calls: `mmap`, `munmap`, `madvise`, `mremap`, `sbrk` and `brk`,
and `<sys/mman.h>`, appear in code only under src/os/ (comments and strings
are not code).

Usage: check_layering.py [ROOT]       check the tree at ROOT (default: ../..)
       check_layering.py --self-test  check that the checker catches each
                                      kind of violation in a made-up tree
Prints one line per violation and exits 1 when there is any.
"""
import os
import re
import sys
import tempfile

LAYER_RANK = {"os": 0, "base": 1, "core": 2, "designs": 2, "override": 3}
SOURCE_EXT = (".c", ".h", ".cpp", ".hpp", ".cc")
SYSCALLS = ("mmap", "munmap", "madvise", "mremap", "sbrk", "brk")
SYSCALL_RE = re.compile(r"\b(" + "|".join(SYSCALLS) + r")\b")
INCLUDE_RE = re.compile(r'^\s*#\s*include\s*([<"])([^">]+)[">]', re.M)
# Designs built on another design's code: bestfit-tls runs bestfit's fit
# heap per thread; the classic library (designs/classic/) combines both.
DESIGN_USES = {"bestfit-tls": ("bestfit",), "classic": ("bestfit", "bestfit-tls")}


def strip_comments_and_strings(text):
    """Blanks out comments, string and character literals, keeping newlines
    so that line numbers stay right. #include lines are kept whole."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("\n" * text.count("\n", i, j))
            i = j
        elif c in "\"'":
            line_start = text.rfind("\n", 0, i) + 1
            if re.match(r"\s*#\s*include", text[line_start:i]):
                out.append(c)
                i += 1
                continue
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(c + " " * max(0, min(j, n) - i - 1) + (c if j < n else ""))
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def layer_of(relpath):
    """('core', None) for src/core/x.c; ('designs', 'pow2') for a design's
    folder, ('designs', None) for src/designs/design.h; None outside src/."""
    parts = relpath.split("/")
    if len(parts) < 3 or parts[0] != "src" or parts[1] not in LAYER_RANK:
        return None
    sub = parts[2] if parts[1] == "designs" and len(parts) > 3 else None
    return parts[1], sub


def check_include(src_rel, target, root):
    """The reason this include breaks the layering, or None."""
    me, my_sub = layer_of(src_rel)
    if target.startswith("tsalloc") or target == "my_malloc.h":
        if os.path.exists(os.path.join(root, "include", target)):
            return None if me in ("core", "designs", "override") else \
                "%s includes the public header %s" % (me, target)
    src_dir = os.path.dirname(src_rel)
    if os.path.exists(os.path.join(root, src_dir, target)):
        resolved = os.path.normpath(os.path.join(src_dir, target))
    elif os.path.exists(os.path.join(root, "src", target)) or \
            target.split("/")[0] in LAYER_RANK:
        resolved = os.path.normpath(os.path.join("src", target))
    else:
        return None  # a system header
    other = layer_of(resolved)
    if other is None:
        return "includes %s, outside the layers" % resolved
    them, their_sub = other
    if me == "core" and them == "designs" and their_sub is None:
        return None  # the design contract
    if LAYER_RANK[them] > LAYER_RANK[me]:
        return "%s includes %s of the higher layer %s" % (me, resolved, them)
    if them != me and LAYER_RANK[them] == LAYER_RANK[me]:
        return "%s includes %s of its peer layer %s" % (me, resolved, them)
    if me == "designs" and their_sub is not None and their_sub != my_sub:
        if their_sub not in DESIGN_USES.get(my_sub, ()):
            return "design %s includes %s of design %s" % (my_sub, resolved, their_sub)
    return None


def check_tree(root):
    problems = []
    for top in ("src", "include"):
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            for f in sorted(files):
                if not f.endswith(SOURCE_EXT):
                    continue
                path = os.path.join(dirpath, f)
                rel = os.path.relpath(path, root).replace(os.sep, "/")
                with open(path, encoding="utf-8", errors="replace") as fh:
                    code = strip_comments_and_strings(fh.read())
                for m in INCLUDE_RE.finditer(code):
                    line = code.count("\n", 0, m.start()) + 1
                    target = m.group(2)
                    if target == "sys/mman.h" and not rel.startswith("src/os/"):
                        problems.append("%s:%d: includes <sys/mman.h> outside src/os/" % (rel, line))
                        continue
                    if rel.startswith("include/"):
                        if m.group(1) == '"' and not os.path.exists(
                                os.path.join(root, "include", os.path.dirname(rel[8:]), target)) \
                                and not os.path.exists(os.path.join(root, "include", target)):
                            problems.append("%s:%d: public header includes %s" % (rel, line, target))
                        continue
                    why = check_include(rel, target, root)
                    if why:
                        problems.append("%s:%d: %s" % (rel, line, why))
                if rel.startswith("src/os/"):
                    continue
                no_includes = INCLUDE_RE.sub("", code)
                for lineno, text in enumerate(no_includes.split("\n"), 1):
                    for m in SYSCALL_RE.finditer(text):
                        problems.append("%s:%d: calls %s outside src/os/" % (rel, lineno, m.group(1)))
    return problems


def write(root, rel, text):
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as fh:
        fh.write(text)


def self_test():
    """Each made-up violation must be reported, and the clean tree must pass."""
    clean = {
        "include/tsalloc.h": "#include <stddef.h>\n",
        "src/os/os.h": "#include <sys/mman.h>\nstatic void *m(void) { return mmap(0, 0, 0, 0, -1, 0); }\n",
        "src/base/base.h": '#include "os/os.h"\n',
        "src/core/internal.h": '#include "base/base.h"\n#include "tsalloc.h"\n/* mmap in a comment */\n',
        "src/core/api.c": '#include "designs/design.h"\n',
        "src/designs/bestfit-tls/t.h": '#include "designs/bestfit/fit.h"\n',
        "src/core/page.c": '#include "internal.h"\nstatic const char *s = "sbrk";\n',
        "src/designs/design.h": '#include "base/base.h"\n',
        "src/designs/pow2/pow2.h": '#include "designs/design.h"\n',
        "src/designs/bestfit/fit.h": '#include "designs/design.h"\n',
        "src/designs/classic/c.c": '#include "designs/bestfit/fit.h"\n',
        "src/override/override.c": '#include "core/internal.h"\n#include "designs/pow2/pow2.h"\n',
    }
    bad = {
        "base includes core": ("src/base/x.c", '#include "core/internal.h"\n'),
        "os includes base": ("src/os/y.c", '#include "base/base.h"\n'),
        "designs include override": ("src/designs/pow2/w.c", '#include "override/o.h"\n'),
        "design includes another": ("src/designs/pow2/v.c", '#include "designs/bestfit/fit.h"\n'),
        "design includes core": ("src/designs/bins/u.c", '#include "core/internal.h"\n'),
        "core includes a design": ("src/core/y.c", '#include "designs/pow2/pow2.h"\n'),
        "bestfit includes bestfit-tls": ("src/designs/bestfit/x.c", '#include "designs/bestfit-tls/t.h"\n'),
        "base includes public": ("src/base/t.c", '#include "tsalloc.h"\n'),
        "mmap in core": ("src/core/s.c", "void *f(void) { return mmap(0, 1, 3, 34, -1, 0); }\n"),
        "sbrk in a design": ("src/designs/bins/r.c", "void *g(void) { return sbrk(0); }\n"),
        "brk in base": ("src/base/q.c", "int h(void *p) { return brk(p); }\n"),
        "madvise in override": ("src/override/p.c", "int k(void) { return madvise(0, 0, 4); }\n"),
        "mremap in core": ("src/core/n.c", "void *k(void) { return mremap(0, 0, 0, 1); }\n"),
        "munmap in core": ("src/core/m.c", "int k(void) { return munmap(0, 0); }\n"),
        "mman.h in core": ("src/core/l.c", "#include <sys/mman.h>\n"),
    }
    failures = 0
    with tempfile.TemporaryDirectory() as root:
        for rel, text in clean.items():
            write(root, rel, text)
        found = check_tree(root)
        if found:
            print("self-test: the clean tree was reported:", *found, sep="\n  ")
            failures += 1
    for what, (rel, text) in bad.items():
        with tempfile.TemporaryDirectory() as root:
            for r, t in clean.items():
                write(root, r, t)
            write(root, rel, text)
            found = check_tree(root)
            if not any(p.startswith(rel + ":") for p in found):
                print("self-test: not caught: %s (%s)" % (what, rel))
                failures += 1
    print("self-test: %d cases, %d missed" % (len(bad) + 1, failures))
    return 1 if failures else 0


def main(argv):
    if argv[1:] == ["--self-test"]:
        return self_test()
    root = argv[1] if len(argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..")
    problems = check_tree(os.path.abspath(root))
    for p in problems:
        print(p)
    print("layering: %d violation%s" % (len(problems), "" if len(problems) == 1 else "s"))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
