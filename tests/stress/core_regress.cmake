# Core regressions around glibc's thread-stack cache.
add_executable(core_glibc_stacks ${CMAKE_CURRENT_LIST_DIR}/core_glibc_stacks.c)
target_include_directories(core_glibc_stacks PRIVATE ${TS_TEST_SUPPORT})
target_link_libraries(core_glibc_stacks PRIVATE Threads::Threads ${CMAKE_DL_LIBS})
ts_preload_test(core_deadlock_join core_glibc_stacks ARGS deadlock DESIGNS tsalloc TIMEOUT 30
                ENV GLIBC_TUNABLES=glibc.pthread.stack_cache_size=0)
ts_preload_test(core_stale_tsd core_glibc_stacks ARGS stale-tsd DESIGNS tsalloc TIMEOUT 60
                ENV GLIBC_TUNABLES=glibc.pthread.stack_cache_size=8600000)
