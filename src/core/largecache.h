/* The large blocks' cache of freed regions (largecache.c), for large.c.
 * The policy is described at the top of large.c; its shards' locks (private
 * to largecache.c) are leaves taken after move_lock or a table stripe.
 */
#ifndef TS_CORE_LARGECACHE_H
#define TS_CORE_LARGECACHE_H

#include "core/internal.h"

#define OS_PAGE ((size_t)4096)

typedef struct lcache_entry {
    uintptr_t base;
    size_t size;
    size_t dirty; /* bytes still resident (all or nothing per region, roughly) */
    uint64_t freed_at;
    /* All of it reads as zeros: set only by a purge that succeeded, never
     * inferred from `dirty`, which is an estimate after splits. */
    bool zero;
    /* The OS refused to purge it (e.g. locked by mlockall): it is unmapped
     * after the purge delay instead of purged again and again. */
    bool stuck;
    /* Which of our mappings it lies in (a number from new_origin). Only
     * pieces of one mapping are joined: a region across two mappings may be
     * two kernel VMAs, which mremap refuses to move or grow as one. */
    uint64_t origin;
} lcache_entry_t;

/* Keep a freed region for reuse (joined with cached neighbours of the same
 * mapping), or unmap it when the cache cannot hold it. */
TS_HIDDEN void _ts_lcache_put(uintptr_t base, size_t size, uint64_t origin);
/* Take a region for `need` bytes into *out: false when none fits or grows. */
TS_HIDDEN bool _ts_lcache_take(size_t need, size_t align, lcache_entry_t *out);
/* The smallest rest worth splitting off a region of `need` bytes. */
TS_HIDDEN size_t _ts_lcache_split_min(size_t need);
/* Whether a block at p was freed recently (to name a double free). */
TS_HIDDEN bool _ts_lcache_freed_recently(uintptr_t p);
/* The cached region holding u, if any. */
TS_HIDDEN bool _ts_lcache_find(uintptr_t u, uintptr_t *start, size_t *size);
TS_HIDDEN void _ts_lcache_atfork_prepare(void);
TS_HIDDEN void _ts_lcache_atfork_parent(void);
TS_HIDDEN void _ts_lcache_atfork_child(void);

#endif
