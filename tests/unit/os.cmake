# The OS layer and base utilities, linked directly from their objects.
ts_test(os_base SOURCES ${CMAKE_CURRENT_LIST_DIR}/os_base.c $<TARGET_OBJECTS:ts_platform>)
ts_test(os_base_env_hook SOURCES ${CMAKE_CURRENT_LIST_DIR}/os_base.c $<TARGET_OBJECTS:ts_platform>
        ARGS env-hook ENV TSALLOC_TEST_OS_FAIL=mmap:1:2)
# The spin lock and the peak counter, hammered by threads.
ts_test(base_sync SOURCES ${CMAKE_CURRENT_LIST_DIR}/base_sync.c $<TARGET_OBJECTS:ts_platform>)
# The futex mutex and the seed designs' lock type, hammered by threads; then
# TSALLOC_LOCK naming each kind.
ts_test(base_futex SOURCES ${CMAKE_CURRENT_LIST_DIR}/base_futex.c $<TARGET_OBJECTS:ts_platform>)
foreach(kind pthread futex spin)
  add_test(NAME "base_futex[TSALLOC_LOCK=${kind}]" COMMAND base_futex ${kind})
  set_tests_properties("base_futex[TSALLOC_LOCK=${kind}]" PROPERTIES TIMEOUT 120
                       ENVIRONMENT "TSALLOC_LOCK=${kind}")
endforeach()
