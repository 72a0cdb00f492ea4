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

# Misuse: the checks of every build, then those of the checked build too.
if(TARGET tsalloc-tsalloc-static)
  ts_test(heap_misuse SOURCES ${CMAKE_CURRENT_LIST_DIR}/heap_misuse.c
          LIBS tsalloc-tsalloc-static TIMEOUT 60)
  ts_test(heap_misuse_checked SOURCES ${CMAKE_CURRENT_LIST_DIR}/heap_misuse.c
          LIBS tsalloc-checked-static TIMEOUT 60)
  target_compile_definitions(heap_misuse_checked PRIVATE HEAP_MISUSE_CHECKED)
endif()

# C++: tsalloc/heap.hpp with standard containers and std::pmr (C++17).
if(TARGET tsalloc-tsalloc-static)
  ts_test(heap_cxx SOURCES ${CMAKE_CURRENT_LIST_DIR}/heap_cxx.cpp LIBS tsalloc-tsalloc-static
          TIMEOUT 60)
  set_target_properties(heap_cxx PROPERTIES CXX_STANDARD 17 CXX_STANDARD_REQUIRED ON)
endif()
