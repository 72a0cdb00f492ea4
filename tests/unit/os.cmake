# The OS layer and base utilities, linked directly from their objects.
ts_test(os_base SOURCES ${CMAKE_CURRENT_LIST_DIR}/os_base.c $<TARGET_OBJECTS:ts_platform>)
ts_test(os_base_env_hook SOURCES ${CMAKE_CURRENT_LIST_DIR}/os_base.c $<TARGET_OBJECTS:ts_platform>
        ARGS env-hook ENV TSALLOC_TEST_OS_FAIL=mmap:1:2)
# The spin lock and the peak counter, hammered by threads.
ts_test(base_sync SOURCES ${CMAKE_CURRENT_LIST_DIR}/base_sync.c $<TARGET_OBJECTS:ts_platform>)
