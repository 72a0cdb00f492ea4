/* Every TSALLOC_* option of every design, in one list (an X-macro): the
 * table in base/options.c, the enum of ids in base/options.h, the
 * `tsalloc options` printer and the docs/options.md check all expand it.
 *
 *   TS_OPTION(ID, NAME, OWNER, TYPE, DEFAULT, MIN, MAX, HELP)
 *
 * NAME is the variable without its TSALLOC_ prefix; two owners may share a
 * variable (STATS). OWNER and TYPE are suffixes of TS_OWNER_* and TS_OPTTYPE_*.
 * Invariants: MIN <= DEFAULT <= MAX; the core's options come first, in the
 * order of enum ts_option (core/internal.h), so that its index is their id;
 * HELP is one line. TEXT options are read by their owner itself (the OS
 * layer sits below this table); their numbers are unused.
 */
/* clang-format off */
/* ---- core: tsalloc, the fast allocator ---- */
TS_OPTION(PURGE_DELAY_MS, "PURGE_DELAY_MS", CORE, INT, 100, 0, 3600 * 1000,
          "ms a freed page or cached region stays resident before purge")
TS_OPTION(PURGE_THREAD, "PURGE_THREAD", CORE, BOOL, 1, 0, 1,
          "purge from a lazily started helper thread (0: on allocator calls)")
TS_OPTION(SEGMENT_CACHE, "SEGMENT_CACHE", CORE, INT, 16, 0, 4096,
          "free 4 MiB segments kept mapped (purged) for reuse")
TS_OPTION(LARGE_CACHE_MB, "LARGE_CACHE_MB", CORE, INT, 256, 0, 1 << 20,
          "MiB of freed large blocks kept resident for reuse")
TS_OPTION(HUGE_PAGES, "HUGE_PAGES", CORE, BOOL, 0, 0, 1,
          "back the segments of heaps past 2 MiB with transparent huge pages")
TS_OPTION(RESCUE, "RESCUE", CORE, BOOL, 1, 0, 1,
          "give back full pages of idle threads that other threads freed")
TS_OPTION(STATS, "STATS", CORE, CHOICE, 0, 0, 2,
          "print statistics at exit (1: text, 2: JSON)")
TS_OPTION(VERBOSE, "VERBOSE", CORE, CHOICE, 0, 0, 2,
          "report options and OS refusals on stderr")
TS_OPTION(SHARED_START, "SHARED_START", CORE, INT, 16, 0, 1 << 20,
          "threads with a heap from which on a new thread starts on the shared heap (0: never)")
TS_OPTION(CORE_ZERO_ON_FREE, "ZERO_ON_FREE", CORE, SIZE, 0, 0, TS_KB(512),
          "bytes zeroed at the start of each freed block (0: none; frees take the slow path)")

/* ---- tsalloc-secure, the hardened build ---- */
TS_OPTION(QUARANTINE, "QUARANTINE", SECURE, SIZE, TS_MB(1), 0, TS_GB(1),
          "bytes of freed blocks a thread keeps zeroed and unused before reuse (0: none)")
TS_OPTION(ZERO_ON_FREE, "ZERO_ON_FREE", SECURE, SIZE, TS_KB(4), 0, TS_KB(512),
          "bytes zeroed at the start of each freed block (whole blocks up to this size)")
TS_OPTION(DEALLOC_MISMATCH, "DEALLOC_MISMATCH", SECURE, BOOL, 1, 0, 1,
          "abort when free or realloc gets a block of new or new[], or delete one of malloc")
/* ---- the heap profiler of tsalloc (src/core/prof.c) ---- */
TS_OPTION(PROF, "PROF", PROF, BOOL, 0, 0, 1,
          "sample allocations and write heap profiles (docs/profiling.md)")
TS_OPTION(PROF_SAMPLE, "PROF_SAMPLE", PROF, SIZE, TS_KB(512), 1, TS_GB(1),
          "mean bytes allocated between two samples (1: every allocation)")
TS_OPTION(PROF_FILE, "PROF_FILE", PROF, TEXT, 0, 0, 0,
          "profile file name (%p: process id, %n: sequence number)")
TS_OPTION(PROF_FINAL, "PROF_FINAL", PROF, BOOL, 1, 0, 1,
          "write a profile at exit")
TS_OPTION(PROF_PEAK_GROWTH, "PROF_PEAK_GROWTH", PROF, INT, 0, 0, 100000,
          "percent above the last peak profile that writes the next (0: none)")
TS_OPTION(PROF_INTERVAL, "PROF_INTERVAL", PROF, SIZE, 0, 0, TS_GB(1024 * 1024),
          "write a numbered profile every this many bytes allocated (0: never)")
TS_OPTION(PROF_SIGNAL, "PROF_SIGNAL", PROF, INT, 0, 0, 64,
          "signal number whose arrival writes a numbered profile (0: none)")
TS_OPTION(PROF_ACTIVE, "PROF_ACTIVE", PROF, BOOL, 1, 0, 1,
          "sample from the start (0: only once ts_prof_set_active(1) is called)")
TS_OPTION(PROF_UNWIND, "PROF_UNWIND", PROF, CHOICE, 1, 0, 2,
          "call stacks from 0: frame pointers, 1: the unwind tables, 2: glibc backtrace()")
TS_OPTION(PROF_SEED, "PROF_SEED", PROF, INT, 0, 0, 4294967295LL,
          "seed of the sampling distances (0: random)")
TS_OPTION(LEAKS, "LEAKS", PROF, BOOL, 0, 0, 1,
          "report the sampled blocks still live at exit on stderr")
TS_OPTION(LEAKS_EXITCODE, "LEAKS_EXITCODE", PROF, INT, 0, 0, 255,
          "exit status of a process that leaked (0: keep its own)")

/* ---- bestfit and bestfit-tls ---- */
TS_OPTION(BESTFIT_MIN_SPLIT, "BESTFIT_MIN_SPLIT", BESTFIT, SIZE, 32, 32, TS_GB(1),
          "least payload bytes of a split-off remainder (rounded up to 16)")
TS_OPTION(BESTFIT_TRIM_THRESHOLD, "BESTFIT_TRIM_THRESHOLD", BESTFIT, SIZE, TS_KB(128), -1,
          TS_GB(1024), "give the top back when the free block at the break exceeds this "
                       "(-1: never)")
TS_OPTION(BESTFIT_GROW_CHUNK, "BESTFIT_GROW_CHUNK", BESTFIT, SIZE, TS_KB(64), TS_KB(4), TS_GB(1),
          "least sbrk increment (rounded up to 16)")

/* ---- pow2 and pow2-partitioned ---- */
TS_OPTION(POW2_PARTITIONS, "POW2_PARTITIONS", POW2, INT, 0, 0, 64,
          "partitions of pow2-partitioned (0: one per CPU the process may use)")
TS_OPTION(POW2_GIVE_BACK, "POW2_GIVE_BACK", POW2, SIZE, TS_MB(2), TS_MB(2), TS_GB(1024),
          "once the free chunks at the top of the sbrk heap reach this, all but one go back")
TS_OPTION(POW2_LAZY, "POW2_LAZY", POW2, INT, 8, 0, 64,
          "freed blocks per order and partition kept unmerged (0: merge at once)")

/* ---- bins ---- */
TS_OPTION(BINS_CACHE, "BINS_CACHE", BINS, SIZE, TS_MB(16), 0, TS_GB(1024),
          "bytes of freed mapped blocks each arena keeps for reuse (0: no cache)")
TS_OPTION(BINS_KEEP_CHUNKS, "BINS_KEEP_CHUNKS", BINS, INT, 4, 0, 1024,
          "empty chunks each arena keeps before unmapping more")

/* ---- the seed designs' locks (bestfit, bestfit-tls's sbrk lock, pow2, pow2-partitioned) ---- */
TS_OPTION(LOCK, "LOCK", SEEDS, TEXT, 0, 0, 0,
          "futex, pthread or spin: the kind of every seed design lock (unset: each design's own)")

/* ---- libtsalloc-classic (read by the OS layer) ---- */
TS_OPTION(CLASSIC_BREAK, "CLASSIC_BREAK", CLASSIC, TEXT, 0, 0, 0,
          "private or sbrk: the break the classic library's designs grow")

/* ---- the override shim, for every design but tsalloc ---- */
TS_OPTION(SHIM_STATS, "STATS", SHIM, BOOL, 0, 0, 1,
          "print the malloc_stats() summary on stderr at exit")

/* ---- the trace recorder (set by `tsalloc record`) ---- */
TS_OPTION(RECORD_FILE, "RECORD_FILE", RECORD, TEXT, 0, 0, 0,
          "the trace file to write (%p: the process id)")
TS_OPTION(RECORD_PID, "RECORD_PID", RECORD, TEXT, 0, 0, 0,
          "the process that records to a file without %p (not its children)")

/* ---- test hooks ---- */
TS_OPTION(TEST_OS_FAIL, "TEST_OS_FAIL", TEST, TEXT, 0, 0, 0,
          "<ops>:<skip>:<count>: make OS memory calls fail (tests only)")
TS_OPTION(TEST_STRICT_OVERCOMMIT, "TEST_STRICT_OVERCOMMIT", TEST, TEXT, 0, 0, 0,
          "1: act as under vm.overcommit_memory=2 (tests only)")
TS_OPTION(EXPECT_DESIGN, "EXPECT_DESIGN", TEST, TEXT, 0, 0, 0,
          "the design a bench program must find loaded (tests only)")
/* clang-format on */
