"""The allocators tsbench compares: glibc (no preload), the peers
(jemalloc, tcmalloc, mimalloc from the distribution), every tsalloc design
found in the build's lib/, and libraries given with --allocator. A missing
one stays in the list, marked unavailable, so the report can say why.

An --allocator spec is NAME=PATH[:VAR=VALUE...]: the library to preload and
environment variables set for every run under it, so that one library can
run under several settings (bestfit-futex=build/lib/libtsalloc-bestfit.so:
TSALLOC_LOCK=futex). An empty PATH is glibc with those variables. A path
cannot hold ':' (LD_PRELOAD separates libraries with it); a value can, where
what follows the ':' is not VAR=... (MALLOC_CONF=prof:true,lg_prof_sample:19).
"""

import glob
import os
import shutil
import subprocess
import sysconfig


APT_PACKAGES = ["libjemalloc2", "libtcmalloc-minimal4", "libmimalloc2.0"]
APT_LINE = "apt-get install -y " + " ".join(APT_PACKAGES)


# Peer allocators: (name, library file name, Debian package).
PEERS = [
    ("jemalloc", "libjemalloc.so.2", "libjemalloc2"),
    ("tcmalloc", "libtcmalloc_minimal.so.4", "libtcmalloc-minimal4"),
    ("mimalloc", "libmimalloc.so.2", "libmimalloc2.0"),
]


class Allocator:
    """A malloc to compare: a library to preload (path), or glibc (no path)."""

    def __init__(self, name, path, kind, available=True, note="", env=None):
        self.name = name
        self.path = path            # None: the system malloc (glibc), no preload
        self.kind = kind            # system, peer, tsalloc, user
        self.available = available
        self.note = note
        self.version = ""
        self.env = dict(env or {})  # set for every run under this allocator

    def to_json(self):
        doc = {"name": self.name, "path": self.path, "kind": self.kind,
               "available": self.available, "note": self.note, "version": self.version}
        if self.env:
            doc["env"] = dict(self.env)
        return doc


def parse_allocator_spec(spec):
    """NAME=PATH[:VAR=VALUE...] -> (name, path or None, env dict)."""
    if "=" not in spec:
        raise SystemExit("tsbench: --allocator wants NAME=/path/lib.so[:VAR=VALUE...], got %r"
                         % spec)
    name, rest = spec.split("=", 1)
    parts = rest.split(":")
    env = {}
    var = None
    for assignment in parts[1:]:
        name_part, eq, value = assignment.partition("=")
        if eq and name_part.replace("_", "a").isalnum() and not name_part[0].isdigit():
            var = name_part
            env[var] = value
        elif var is not None:  # a value with ':' in it (MALLOC_CONF=prof:true)
            env[var] += ":" + assignment
        else:
            raise SystemExit("tsbench: --allocator %s: %r is not VAR=VALUE" % (name, assignment))
    return name, (os.path.abspath(parts[0]) if parts[0] else None), env


def default_peer_dir():
    multiarch = sysconfig.get_config_var("MULTIARCH") or "x86_64-linux-gnu"
    for d in ("/usr/lib/" + multiarch, "/lib/" + multiarch, "/usr/lib64", "/usr/lib"):
        if os.path.isdir(d):
            return d
    return "/usr/lib"


def discover_tsalloc(build, libdir=None):
    """libtsalloc.so is 'tsalloc'; libtsalloc-<design>.so is '<design>'
    (in libdir, default BUILD/lib). libtsalloc-classic.so only exports the
    seed API and libtsalloc-record.so is the trace recorder: neither is a
    malloc of its own."""
    libdir = libdir or os.path.join(build, "lib")
    found = []
    main = os.path.join(libdir, "libtsalloc.so")
    if os.path.exists(main):
        found.append(Allocator("tsalloc", main, "tsalloc"))
    designs = {}
    for path in glob.glob(os.path.join(libdir, "libtsalloc-*.so")):
        design = os.path.basename(path)[len("libtsalloc-"):-len(".so")]
        if design and design not in ("classic", "record"):
            designs[design] = path
    for design in sorted(designs):
        found.append(Allocator(design, designs[design], "tsalloc"))
    return found


def discover_peers(peer_dir):
    peers = []
    for name, lib, package in PEERS:
        path = os.path.join(peer_dir, lib)
        if os.path.exists(path):
            peers.append(Allocator(name, path, "peer"))
        else:
            peers.append(Allocator(name, path, "peer", available=False,
                                   note="not installed (%s)" % package))
    return peers


def install_peers(peer_dir, log):
    """apt-get install the missing peers when root; apt-get update only if needed."""
    missing = [p for p in discover_peers(peer_dir) if not p.available]
    if not missing:
        return
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        log("tsbench: --install-peers needs root and apt-get; run: " + APT_LINE)
        return
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    cmd = ["apt-get", "install", "-y", "-q"] + APT_PACKAGES
    log("tsbench: installing peers: " + " ".join(cmd))
    if subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL,
                      stderr=subprocess.DEVNULL).returncode == 0:
        return
    log("tsbench: apt-get install failed; running apt-get update first")
    subprocess.run(["apt-get", "update", "-q"], env=env, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    if subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL,
                      stderr=subprocess.DEVNULL).returncode != 0:
        log("tsbench: could not install the peers; run: " + APT_LINE)


def select_allocators(args, log):
    """Every candidate, in report order: glibc, peers, tsalloc designs, user.
    --allocators picks some, in its order; its word "peers" stands for the
    installed peers."""
    candidates = [Allocator("glibc", None, "system")]
    candidates += discover_peers(args.peer_dir)
    candidates += discover_tsalloc(args.build, getattr(args, "lib_dir", None))
    for spec in args.allocator or []:
        name, path, env = parse_allocator_spec(spec)
        candidates = [c for c in candidates if c.name != name]
        if path is None or os.path.isfile(path):
            candidates.append(Allocator(name, path, "user", env=env))
        else:
            candidates.append(Allocator(name, path, "user", available=False,
                                        note="file not found", env=env))
    if args.allocators:
        wanted = []
        for n in (n.strip() for n in args.allocators.split(",")):
            if n == "peers":  # every peer that is installed
                wanted += [c.name for c in candidates if c.kind == "peer" and c.available]
                for c in candidates:
                    if c.kind == "peer" and not c.available:
                        log("tsbench: %s is not installed (%s); install the peers with: %s"
                            % (c.name, c.path, APT_LINE))
            elif n:
                wanted.append(n)
        by_name = {c.name: c for c in candidates}
        chosen = []
        for n in wanted:
            if n in by_name:
                chosen.append(by_name[n])
            else:
                chosen.append(Allocator(n, None, "unknown", available=False,
                                        note="unknown allocator (known: %s)"
                                        % ", ".join(c.name for c in candidates)))
        candidates = chosen
    for c in candidates:
        if c.available:
            continue
        if c.kind == "peer":
            log("tsbench: %s missing (%s); install the peers with: %s" % (c.name, c.path,
                                                                          APT_LINE))
        else:
            log("tsbench: %s missing: %s%s" % (c.name, c.note,
                                               " (%s)" % c.path if c.path else ""))
    return candidates
