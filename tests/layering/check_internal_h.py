#!/usr/bin/env python3
"""Keeps src/core/internal.h grouped by defining file.

internal.h declares what the files of src/core share. Its cross-file
declarations sit under one heading per file, `/* ---- name.c ---- */` (text
may follow the file name). For each function or variable declared with
TS_HIDDEN under such a heading, src/core/name.c must define it; under any
other heading (a topic such as the geometry or the page types) a declared
name must be defined in some file of src/core. Inline functions are defined
in the header itself and need nothing.

Usage: check_internal_h.py [repository root]  (default: two levels up)
Exit status 0 when every declaration is where it belongs, 1 otherwise.
"""
import os
import re
import sys

HEADING = re.compile(r"^/\* ---- (.*?) -+ \*/\s*$")
FILE_IN_HEADING = re.compile(r"^([A-Za-z0-9_]+\.c)\b")
DECL_START = re.compile(r"^TS_HIDDEN\b")


def strip_comments(text):
    return re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)


def strip_attributes(decl):
    """decl without its __attribute__((...)) parts (parentheses balanced)."""
    while "__attribute__" in decl:
        at = decl.index("__attribute__")
        depth, i = 0, decl.index("(", at)
        while True:
            depth += {"(": 1, ")": -1}.get(decl[i], 0)
            i += 1
            if depth == 0:
                break
        decl = decl[:at] + decl[i:]
    return decl


def declarations(header_text):
    """(heading, file or None, name, line) for each TS_HIDDEN declaration."""
    lines = header_text.split("\n")
    code_lines = strip_comments(header_text).split("\n")
    heading, owner = None, None
    out = []
    i = 0
    while i < len(lines):
        m = HEADING.match(lines[i])
        if m:
            heading = m.group(1)
            f = FILE_IN_HEADING.match(heading)
            owner = f.group(1) if f else None
            i += 1
            continue
        code = code_lines[i]
        if DECL_START.match(code):
            start = i
            decl = code
            while ";" not in decl and i + 1 < len(lines):
                i += 1
                decl += " " + code_lines[i]
            decl = strip_attributes(decl.split(";")[0])
            if "(" in decl and not re.search(r"\(\s*\*\s*\w+\s*\)", decl.split("(")[0] + "("):
                name = re.findall(r"(\w+)\s*\(", decl)[0]
            else:  # a variable: the last identifier before any array bound
                name = re.findall(r"(\w+)\s*(?:\[[^\]]*\]\s*)*$", decl.strip())[0]
            out.append((heading, owner, name, start + 1))
        i += 1
    return out


def defines(source_text, name):
    code = strip_attributes(strip_comments(source_text))
    # A function definition: the name, its parameters, then a body.
    if re.search(r"^[A-Za-z_][^;=\n]*\b%s\s*\([^;{]*\)\s*\{" % re.escape(name), code, re.M):
        return True
    # A variable definition: at file scope, not extern.
    for m in re.finditer(r"^(?!extern\b)[A-Za-z_][^;(\n]*\b%s\b\s*(\[[^\]]*\]\s*)*(=|;)"
                         % re.escape(name), code, re.M):
        return True
    return False


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..")
    core = os.path.join(root, "src", "core")
    header = os.path.join(core, "internal.h")
    with open(header) as f:
        decls = declarations(f.read())
    sources = {}
    for name in sorted(os.listdir(core)):
        if name.endswith(".c"):
            with open(os.path.join(core, name)) as f:
                sources[name] = f.read()
    problems = []
    for heading, owner, name, line in decls:
        if owner:
            if owner not in sources:
                problems.append("internal.h:%d: heading names %s, which is not in src/core"
                                % (line, owner))
            elif not defines(sources[owner], name):
                where = [f for f, text in sources.items() if defines(text, name)]
                problems.append("internal.h:%d: %s is declared under '%s' but %s"
                                % (line, name, owner, "defined in " + ", ".join(where)
                                   if where else "defined nowhere in src/core"))
        elif not any(defines(text, name) for text in sources.values()):
            problems.append("internal.h:%d: %s (under '%s') is defined nowhere in src/core"
                            % (line, name, heading))
    for p in problems:
        print(p)
    print("internal.h: %d declarations checked, %d misplaced" % (len(decls), len(problems)))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
