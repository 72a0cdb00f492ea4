# The OS layer and base utilities, linked directly from their objects.
ts_test(os_base SOURCES ${CMAKE_CURRENT_LIST_DIR}/os_base.c $<TARGET_OBJECTS:ts_platform>)
ts_test(os_base_env_hook SOURCES ${CMAKE_CURRENT_LIST_DIR}/os_base.c $<TARGET_OBJECTS:ts_platform>
        ARGS env-hook ENV TSALLOC_TEST_OS_FAIL=mmap:1:2)
