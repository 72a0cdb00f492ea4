# First-class heaps (ts_heap_*, docs/heaps.md), in the fast allocator only.
# heap_api runs with no purge delay and no large-block cache, so that the
# purge rules give a destroyed heap's memory back at once.
if(TARGET tsalloc-tsalloc-static)
  ts_test(heap_api SOURCES ${CMAKE_CURRENT_LIST_DIR}/heap_api.c LIBS tsalloc-tsalloc-static
          TIMEOUT 60 ENV TSALLOC_PURGE_DELAY_MS=0 TSALLOC_LARGE_CACHE_MB=0)
  # The same against the checked build, whose invariant checks run.
  ts_test(heap_api_checked SOURCES ${CMAKE_CURRENT_LIST_DIR}/heap_api.c
          LIBS tsalloc-checked-static TIMEOUT 60
          ENV TSALLOC_PURGE_DELAY_MS=0 TSALLOC_LARGE_CACHE_MB=0)
endif()
