# Unit tests of the fast allocator (docs/core.md). Each links libtsalloc.a,
# which replaces malloc in the test program, and may look at its internals
# (src/core/internal.h).
if(TARGET tsalloc-tsalloc-static)
  foreach(area sizeclass pages pages_big pages_remote api oom segments helper heappool huge shared_start calloc_fresh bigcache commit)
    ts_test(core_${area} SOURCES ${CMAKE_CURRENT_LIST_DIR}/core_${area}.c
            LIBS tsalloc-tsalloc-static TIMEOUT 60)
  endforeach()
  set_tests_properties(core_helper PROPERTIES SKIP_RETURN_CODE 77) # in a sanitizer build
  # The segment map as under vm.overcommit_memory=2: read-only but for the
  # pages opened for entries.
  ts_test(core_commit_strict SOURCES ${CMAKE_CURRENT_LIST_DIR}/core_commit.c
          LIBS tsalloc-tsalloc-static TIMEOUT 60 ENV TSALLOC_TEST_STRICT_OVERCOMMIT=1)
  # A long purge delay: the large-block loop must find its regions resident.
  ts_test(core_large SOURCES ${CMAKE_CURRENT_LIST_DIR}/core_large.c
          LIBS tsalloc-tsalloc-static TIMEOUT 60 ENV TSALLOC_PURGE_DELAY_MS=10000)
  # Wholly free segments keep their memory for the purge delay: an hour, and
  # no purge thread, so that nothing is purged before the test asks.
  ts_test(core_segcache SOURCES ${CMAKE_CURRENT_LIST_DIR}/core_segcache.c
          LIBS tsalloc-tsalloc-static TIMEOUT 60
          ENV TSALLOC_PURGE_DELAY_MS=3600000 TSALLOC_PURGE_THREAD=0 TSALLOC_SEGMENT_CACHE=1)
  # Freed blocks zeroed (zerofree.c); the long delay keeps freed large
  # regions mapped for the test to read.
  ts_test(core_zero_on_free SOURCES ${CMAKE_CURRENT_LIST_DIR}/core_zero_on_free.c
          LIBS tsalloc-tsalloc-static TIMEOUT 60
          ENV TSALLOC_ZERO_ON_FREE=4096 TSALLOC_PURGE_DELAY_MS=10000)
endif()
