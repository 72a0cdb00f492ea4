# What a short process pays for the fast allocator, counted against glibc:
# page faults before main and of a short program, and its threads.
if(TARGET tsalloc-tsalloc)
  ts_test(core_startup SOURCES ${CMAKE_CURRENT_LIST_DIR}/core_startup.c
          LIBS ${CMAKE_DL_LIBS} ARGS $<TARGET_FILE:tsalloc-tsalloc> TIMEOUT 60)
endif()
