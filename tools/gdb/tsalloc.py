# gdb commands for the fast allocator (libtsalloc), on a live process or a
# core file: `source tools/gdb/tsalloc.py`, then
#   ts-block ADDR   which block holds ADDR: class, start, usable size, live or
#                   free, owning heap (as ts_block_info() in tsalloc.h)
#   ts-heaps        every heap, its thread, and its pages in use per class
#   ts-segments     every mapped segment: layout, pages in use, owner
#   ts-stats        the process-wide counters (bytes committed, peak, ...)
# They read the structures through gdb's symbol and type information (the
# library is built with -g), never by calling into the process, so they work
# on a core file and on a process stopped anywhere, inside malloc included.
# docs/debugging.md shows their output.
import gdb

SEGMENT_SHIFT = 22
SEGMENT_MASK = (1 << SEGMENT_SHIFT) - 1
SEGMENT_HEADER = 64 * 1024
MAP_NONE, MAP_LARGE = 0, 1
PAGE_IN_USE = 2
OWNER_FLAGS = 3
KINDS = {0: "small", 1: "medium", 2: "big"}
HEAP_STATES = {0: "uninitialised", 1: "active", 2: "dead"}
WALK_LIMIT = 1 << 16  # list steps before a walk gives up (a loop: a corrupt heap)


def _sym(name, static_in=None):
    """A variable of the library: global, else static in one of its files."""
    try:
        return gdb.parse_and_eval(name)
    except gdb.error:
        pass
    if static_in:
        try:
            return gdb.parse_and_eval("'%s'::%s" % (static_in, name))
        except gdb.error:
            pass
    sym = gdb.lookup_static_symbol(name)
    if sym is None:
        raise gdb.GdbError("tsalloc: no symbol %s: is libtsalloc (built with -g) loaded?" % name)
    return sym.value()


def _type(name):
    return gdb.lookup_type(name)


def _ptr(addr, type_name):
    return gdb.Value(addr).cast(_type(type_name).pointer())


def _u(v):
    return int(v)


def _read_word(addr):
    return int(gdb.Value(addr).cast(_type("uintptr_t").pointer()).dereference())


def _heap_id(addr):
    if not addr:
        return 0
    try:
        return _u(_ptr(addr, "ts_heap_t").dereference()["id"])
    except gdb.MemoryError:
        return 0


def _free_list_length(page):
    n, b = 0, _u(page["free"])
    while b and n < WALK_LIMIT:
        n += 1
        b = _read_word(b)
    return n


def _page_live(page):
    """Blocks of a page in use: carved minus those on its list and pending."""
    capacity = _u(page["capacity"])
    if _u(page["is_head"]):
        used = capacity - _free_list_length(page)
    else:
        used = min(_u(page["used"]), capacity)
    pending = _u(page["thread_free"]) >> 48
    return max(used - pending, 0)


def block_info(addr):
    """ts_block_info() in Python: a dict, or None for memory not tsalloc's."""
    segmap = _sym("_ts_segmap")
    entries = segmap.type.range()[1] + 1
    chunk = addr >> SEGMENT_SHIFT
    if addr == 0 or chunk >= entries:
        return None
    m = _u(segmap[chunk])
    if m == MAP_NONE:
        return None
    if m == MAP_LARGE:
        return _large_info(addr)
    seg = addr & ~SEGMENT_MASK
    info = {"state": "free", "segment": seg, "large": False, "class": None}
    if addr - seg < SEGMENT_HEADER:
        info["state"] = "metadata (segment header)"
        return info
    page = _ptr(seg, "ts_segment_t").dereference()["pages"][(addr - seg) >> m]
    info["page"] = _u(page.address)
    start, size = _u(page["start"]), _u(page["block_size"])
    if _u(page["state"]) != PAGE_IN_USE or not size or addr < start:
        info["state"] = "free (no block: page not in use)"
        return info
    k = (addr - start) // size
    if k >= _u(page["reserved"]):
        info["state"] = "free (no block: the page's tail)"
        return info
    bstart = start + k * size
    owner = _u(page["owner"]) & ~OWNER_FLAGS
    marked = _read_word(bstart + 8) == (bstart ^ _u(page["mark_key"]))
    live = k < _u(page["carved"]) and not marked and not _u(page["rescued"])
    info.update(state="live" if live else "free", start=bstart, usable=size,
                offset=addr - bstart, heap=owner, heap_id=_heap_id(owner))
    info["class"] = _u(page["cls"])
    return info


def _large_info(addr):
    stripes = _sym("stripes", "large.c")
    for i in range(stripes.type.range()[1] + 1):
        s = stripes[i]
        slots = s["slots"]
        for j in range(_u(s["cap"]) if _u(slots) else 0):
            e = slots[j]
            p, size = _u(e["ptr"]), _u(e["size"])
            if p and p <= addr < p + size:
                return {"state": "live", "large": True, "class": None, "start": p,
                        "usable": size, "offset": addr - p, "heap": 0, "heap_id": 0}
    lcache = _sym("lcache", "large.c")
    for i in range(_u(_sym("lcache_n", "large.c"))):
        p, size = _u(lcache[i]["base"]), _u(lcache[i]["size"])
        if p <= addr < p + size:
            return {"state": "free (large block cache)", "large": True, "class": None,
                    "start": p, "usable": size, "offset": addr - p, "heap": 0, "heap_id": 0}
    return None


def _heap_threads():
    """heap address -> gdb thread number, read from each thread's TLS."""
    found = {}
    inferior = gdb.selected_inferior()
    try:
        current = gdb.selected_thread()
    except gdb.error:
        current = None
    for t in inferior.threads():
        try:
            t.switch()
            found.setdefault(_u(gdb.parse_and_eval("_ts_tls_heap")), t.num)
        except gdb.error:
            pass  # TLS unreadable here (e.g. a core without libthread_db)
    if current is not None and current.is_valid():
        current.switch()
    return found


def _heaps():
    h = _u(_sym("heaps_all", "heap.c"))
    n = 0
    while h and n < WALK_LIMIT:
        yield h
        h = _u(_ptr(h, "ts_heap_t").dereference()["all_next"])
        n += 1


def _page_lists(heap):
    """Every page of a heap: its class queues, then its full list."""
    queues = [heap["queue"][c] for c in range(heap["queue"].type.range()[1] + 1)]
    for q in queues + [heap["full"]]:
        p, n = _u(q["first"]), 0
        while p and n < WALK_LIMIT:
            page = _ptr(p, "ts_page_t").dereference()
            yield page
            p = _u(page["next"])
            n += 1


class TsBlock(gdb.Command):
    """ts-block ADDR: the tsalloc block holding ADDR (as ts_block_info())."""

    def __init__(self):
        super().__init__("ts-block", gdb.COMMAND_DATA)

    def invoke(self, arg, from_tty):
        if not arg:
            raise gdb.GdbError("usage: ts-block ADDRESS")
        addr = _u(gdb.parse_and_eval(arg).cast(_type("uintptr_t")))
        info = block_info(addr)
        if info is None:
            print("0x%x: not tsalloc's memory" % addr)
            return
        line = "0x%x: %s" % (addr, info["state"])
        if "start" in info:
            kind = "large block" if info["large"] else "class %d" % info["class"]
            line += ", %s, block 0x%x + %d, usable %d bytes" % (
                kind, info["start"], info["offset"], info["usable"])
        if info.get("heap"):
            line += ", heap %d (0x%x)" % (info["heap_id"], info["heap"])
        elif "start" in info and not info["large"]:
            line += ", no heap (abandoned)"
        print(line)


class TsHeaps(gdb.Command):
    """ts-heaps: every tsalloc heap, its thread, and its pages per class."""

    def __init__(self):
        super().__init__("ts-heaps", gdb.COMMAND_DATA)

    def invoke(self, arg, from_tty):
        threads = _heap_threads()
        classes = _sym("_ts_classes")
        count = 0
        for h in _heaps():
            heap = _ptr(h, "ts_heap_t").dereference()
            per_class = {}
            for page in _page_lists(heap):
                c = _u(page["cls"])
                pages, live = per_class.get(c, (0, 0))
                per_class[c] = (pages + 1, live + _page_live(page))
            thread = threads.get(h)
            who = "thread %d" % thread if thread else "no thread"
            total = sum(v[0] for v in per_class.values())
            nbytes = sum(v[1] * _u(classes[c]["size"]) for c, v in per_class.items())
            print("heap %d at 0x%x (%s, %s): %d pages, %d bytes in live blocks" % (
                _u(heap["id"]), h, who, HEAP_STATES.get(_u(heap["state"]), "?"), total, nbytes))
            for c in sorted(per_class):
                pages, live = per_class[c]
                size = _u(classes[c]["size"])
                print("  class %2d (%6d B): %3d pages, %6d blocks live, %9d bytes" % (
                    c, size, pages, live, live * size))
            count += 1
        print("%d heaps" % count)


class TsSegments(gdb.Command):
    """ts-segments: every mapped tsalloc segment, its layout and use."""

    def __init__(self):
        super().__init__("ts-segments", gdb.COMMAND_DATA)

    def invoke(self, arg, from_tty):
        s, n = _u(_sym("registry", "registry.c")), 0
        while s and n < WALK_LIMIT:
            seg = _ptr(s, "ts_segment_t").dereference()
            kind = _u(seg["kind"])
            owner = _u(seg["owner"])
            if kind in KINDS:
                first, count = _u(seg["first_page"]), _u(seg["page_count"])
                print("segment 0x%x: %s pages (%d KiB), %d of %d in use, owner %s" % (
                    s, KINDS[kind], (1 << _u(seg["page_shift"])) >> 10,
                    _u(seg["used_pages"]), count - first,
                    "heap %d" % _heap_id(owner) if owner else "none"))
            else:
                print("segment 0x%x: not laid out yet" % s)
            s = _u(seg["reg_next"])
            n += 1
        print("%d segments" % n)


class TsStats(gdb.Command):
    """ts-stats: tsalloc's process-wide counters."""

    FIELDS = ("committed", "peak", "purged", "unmapped", "dirty", "segments",
              "segments_cached", "segments_abandoned", "large_count", "large_bytes",
              "large_cached_count", "large_cached_bytes", "heaps_live", "heaps_created",
              "threads_exited", "remote_frees")

    def __init__(self):
        super().__init__("ts-stats", gdb.COMMAND_DATA)

    def invoke(self, arg, from_tty):
        stats = _sym("_ts_stats")
        for f in self.FIELDS:
            print("%-20s %d" % (f, _u(stats[f])))
        pages = stats["pages"]
        print("%-20s small %d, medium %d, big %d" % ("pages in use", _u(pages[0]),
                                                      _u(pages[1]), _u(pages[2])))


TsBlock()
TsHeaps()
TsSegments()
TsStats()
