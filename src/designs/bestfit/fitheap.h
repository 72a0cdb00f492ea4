/* Best-fit heap machinery shared by the bestfit and bestfit-tls designs.
 *
 * Header-only (static inline) on purpose: each design compiles its own copy,
 * so the code is written once and yet the two designs' objects, linked
 * together in libtsalloc-classic, define no symbol twice. Nothing here locks:
 * the caller serialises each heap and each segment table.
 *
 * Parts, each including the one before:
 *   fit_layout.h    terms, block header, heap type, configuration, helpers
 *   fit_index.h     the free-block index (two treaps) and the heap invariants
 *   fit_carve.h     split and coalesce: take, put, resize, align
 *   fit_segments.h  the segment table, growth, give-back, pointer validation
 *   fit_check.h     walking and checking a heap (debug hooks, tests)
 */
#ifndef TS_DESIGNS_BESTFIT_FITHEAP_H
#define TS_DESIGNS_BESTFIT_FITHEAP_H

#include "designs/bestfit/fit_check.h"

#endif
