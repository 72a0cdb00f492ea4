# The checked core (TS_CHECKED=1: every ts_assert at the invariants runs,
# src/core/CMakeLists.txt): stress and page tests linked with
# libtsalloc-checked.a, and the API tests under LD_PRELOAD of
# libtsalloc-checked.so. A broken invariant aborts with
# "tsalloc: assertion failed: ...".
if(TARGET tsalloc-checked-static)
  foreach(area threads exit trim)
    ts_test(core_${area}_checked SOURCES ${CMAKE_CURRENT_LIST_DIR}/core_${area}.c
            LIBS tsalloc-checked-static TIMEOUT 120)
  endforeach()
  set_tests_properties(core_trim_checked PROPERTIES ENVIRONMENT TSALLOC_PURGE_DELAY_MS=0)
  # The page bookkeeping unit tests, which look at the internals.
  foreach(area pages pages_big pages_remote)
    ts_test(core_${area}_checked SOURCES ${PROJECT_SOURCE_DIR}/tests/unit/core_${area}.c
            LIBS tsalloc-checked-static TIMEOUT 60)
  endforeach()
  ts_test(core_stress_checked SOURCES ${CMAKE_CURRENT_LIST_DIR}/core_stress.c
          LIBS tsalloc-checked-static ARGS 4 4 12000 TIMEOUT 180)
  target_compile_definitions(core_stress_checked PRIVATE CORE_STRESS_INTERNAL)
  ts_test(core_stress_nodelay_checked SOURCES ${CMAKE_CURRENT_LIST_DIR}/core_stress.c
          LIBS tsalloc-checked-static ARGS 3 3 10000 TIMEOUT 180
          ENV TSALLOC_PURGE_DELAY_MS=0 TSALLOC_PURGE_THREAD=0 TSALLOC_SEGMENT_CACHE=0)
  target_compile_definitions(core_stress_nodelay_checked PRIVATE CORE_STRESS_INTERNAL)
  ts_test(core_stress_huge_checked SOURCES ${CMAKE_CURRENT_LIST_DIR}/core_stress.c
          LIBS tsalloc-checked-static ARGS 3 3 10000 TIMEOUT 180
          ENV TSALLOC_HUGE_PAGES=1 TSALLOC_PURGE_DELAY_MS=1)
  target_compile_definitions(core_stress_huge_checked PRIVATE CORE_STRESS_INTERNAL)
  ts_test(core_bigpages_checked SOURCES ${CMAKE_CURRENT_LIST_DIR}/core_bigpages.c
          LIBS tsalloc-checked-static ARGS 8000 2 TIMEOUT 180
          ENV TSALLOC_PURGE_DELAY_MS=0 TSALLOC_PURGE_THREAD=0 TSALLOC_SEGMENT_CACHE=0)

  ts_preload_test(override_api override_api DESIGNS checked)
  ts_preload_test(cxx_new_delete cxx_new_delete DESIGNS checked)
  ts_preload_test(core_stress_preload core_stress_dyn ARGS 4 3 12000 DESIGNS checked TIMEOUT 180)
  ts_preload_test(generic_stress generic_stress ARGS 4 3 10000 DESIGNS checked TIMEOUT 240)
  ts_preload_test(generic_fork generic_fork DESIGNS checked TIMEOUT 120)
endif()
