# Misuse of the fast allocator: each case must abort with the exact message.
if(TARGET tsalloc-tsalloc-static)
  ts_test(core_misuse SOURCES ${CMAKE_CURRENT_LIST_DIR}/core_misuse.c
          LIBS tsalloc-tsalloc-static TIMEOUT 60)
endif()
