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

# Only libtsalloc exports ts_heap_*: every registered design, dlopen'ed.
set(_ts_heap_libs "")
foreach(d ${TS_ALL_DESIGNS})
  list(APPEND _ts_heap_libs $<TARGET_FILE:tsalloc-${d}>)
endforeach()
if(_ts_heap_libs)
  add_executable(heap_designs ${CMAKE_CURRENT_LIST_DIR}/heap_designs.c)
  target_include_directories(heap_designs PRIVATE ${TS_TEST_SUPPORT})
  target_link_libraries(heap_designs PRIVATE Threads::Threads ${CMAKE_DL_LIBS})
  add_test(NAME heap_designs COMMAND heap_designs ${_ts_heap_libs})
  set_tests_properties(heap_designs PROPERTIES TIMEOUT 60)
endif()
