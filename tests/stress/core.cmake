# Stress tests of the fast allocator (docs/core.md). They link libtsalloc.a,
# which replaces malloc in the test program; core_stress also runs against
# libtsalloc.so under LD_PRELOAD.
if(TARGET tsalloc-tsalloc-static)
  foreach(area threads fork rss prodcons exit rescue sweep)
    ts_test(core_${area} SOURCES ${CMAKE_CURRENT_LIST_DIR}/core_${area}.c
            LIBS tsalloc-tsalloc-static TIMEOUT 90)
  endforeach()
  ts_test(core_stress SOURCES ${CMAKE_CURRENT_LIST_DIR}/core_stress.c
          LIBS tsalloc-tsalloc-static ARGS 4 5 15000 TIMEOUT 120)
  target_compile_definitions(core_stress PRIVATE CORE_STRESS_INTERNAL)
  # Purging right away (no delay) and without the helper thread: the other
  # paths through the same code.
  ts_test(core_stress_nodelay SOURCES ${CMAKE_CURRENT_LIST_DIR}/core_stress.c
          LIBS tsalloc-tsalloc-static ARGS 3 3 12000 TIMEOUT 120
          ENV TSALLOC_PURGE_DELAY_MS=0 TSALLOC_PURGE_THREAD=0 TSALLOC_SEGMENT_CACHE=0)
  target_compile_definitions(core_stress_nodelay PRIVATE CORE_STRESS_INTERNAL)

  # Huge pages on, purging at once after 1 ms: their bookkeeping under churn.
  ts_test(core_stress_huge SOURCES ${CMAKE_CURRENT_LIST_DIR}/core_stress.c
          LIBS tsalloc-tsalloc-static ARGS 3 3 12000 TIMEOUT 120
          ENV TSALLOC_HUGE_PAGES=1 TSALLOC_PURGE_DELAY_MS=1)
  target_compile_definitions(core_stress_huge PRIVATE CORE_STRESS_INTERNAL)

  # The sweep's passes by hand, with no helper thread to run its own.
  ts_test(core_sweep_driven SOURCES ${CMAKE_CURRENT_LIST_DIR}/core_sweep.c
          LIBS tsalloc-tsalloc-static ARGS driven TIMEOUT 60 ENV TSALLOC_PURGE_THREAD=0)

  # Big pages' invariants after every operation, as they are and with purging
  # at once and no helper thread.
  ts_test(core_bigpages SOURCES ${CMAKE_CURRENT_LIST_DIR}/core_bigpages.c
          LIBS tsalloc-tsalloc-static ARGS 15000 1 TIMEOUT 120)
  ts_test(core_bigpages_nodelay SOURCES ${CMAKE_CURRENT_LIST_DIR}/core_bigpages.c
          LIBS tsalloc-tsalloc-static ARGS 10000 2 TIMEOUT 120
          ENV TSALLOC_PURGE_DELAY_MS=0 TSALLOC_PURGE_THREAD=0 TSALLOC_SEGMENT_CACHE=0)

  # Large blocks from several threads, every mapping call checked against the
  # blocks held live.
  ts_test(core_large_stress SOURCES ${CMAKE_CURRENT_LIST_DIR}/core_large_stress.c
          LIBS tsalloc-tsalloc-static ARGS 4 3000 TIMEOUT 120)

  # malloc_trim beside the helper's reclaim of abandoned segments.
  ts_test(core_trim SOURCES ${CMAKE_CURRENT_LIST_DIR}/core_trim.c
          LIBS tsalloc-tsalloc-static TIMEOUT 60 ENV TSALLOC_PURGE_DELAY_MS=0)

  # libtsalloc loaded with dlopen, main's heap made in its last destructor round.
  add_executable(core_exit_dlopen ${CMAKE_CURRENT_LIST_DIR}/core_exit_dlopen.c)
  target_include_directories(core_exit_dlopen PRIVATE ${TS_TEST_SUPPORT})
  target_link_libraries(core_exit_dlopen PRIVATE Threads::Threads ${CMAKE_DL_LIBS})
  add_test(NAME core_exit_dlopen COMMAND core_exit_dlopen $<TARGET_FILE:tsalloc-tsalloc>)
  set_tests_properties(core_exit_dlopen PROPERTIES TIMEOUT 60)

  add_executable(core_stress_dyn ${CMAKE_CURRENT_LIST_DIR}/core_stress.c)
  target_include_directories(core_stress_dyn PRIVATE ${TS_TEST_SUPPORT})
  target_link_libraries(core_stress_dyn PRIVATE Threads::Threads ${CMAKE_DL_LIBS})
  ts_preload_test(core_stress_preload core_stress_dyn ARGS 4 3 12000 DESIGNS tsalloc TIMEOUT 120)
endif()
