# Unit tests of the bins design (docs/bins.md). Each links the static library,
# which replaces malloc in the test program, and may call the design's
# introspection functions (src/designs/bins/bins.h).
if(TARGET tsalloc-bins-static)
  foreach(area select reuse remote churn mapped misuse fork)
    ts_test(bins_${area} SOURCES ${CMAKE_CURRENT_LIST_DIR}/bins_${area}.c
            LIBS tsalloc-bins-static TIMEOUT 60)
  endforeach()
  # The cache of mapped blocks switched off: every big free goes to the OS.
  ts_test(bins_mapped_nocache SOURCES ${CMAKE_CURRENT_LIST_DIR}/bins_mapped.c
          LIBS tsalloc-bins-static ARGS nocache ENV TSALLOC_BINS_CACHE=0 TIMEOUT 60)
endif()
