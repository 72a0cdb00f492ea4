# The hardened build against heap attacks (tests/secure/attacks.c): under
# libtsalloc-secure every attack of the list ends with its exact message at
# 8 B, 4 KiB, 256 KiB and 1 MiB where it applies; under the plain
# libtsalloc, what it catches stays caught and what it does not goes unseen.
# `make secure-report` runs the same probes under every allocator.
add_executable(secure_attacks ${CMAKE_CURRENT_LIST_DIR}/attacks.c)
target_link_libraries(secure_attacks PRIVATE ${CMAKE_DL_LIBS})
if(TARGET tsalloc-secure)
  ts_preload_test(secure_attacks secure_attacks ARGS --check secure DESIGNS secure TIMEOUT 120)
endif()
ts_preload_test(plain_attacks secure_attacks ARGS --check tsalloc DESIGNS tsalloc TIMEOUT 120)

# The hardened build's promises to correct programs (zero-size blocks,
# usable size, zeroed blocks, no immediate reuse, aligned and sized paths).
add_executable(secure_api ${CMAKE_CURRENT_LIST_DIR}/secure_api.c)
target_include_directories(secure_api PRIVATE ${TS_TEST_SUPPORT})
target_link_libraries(secure_api PRIVATE Threads::Threads ${CMAKE_DL_LIBS})
if(TARGET tsalloc-secure)
  ts_preload_test(secure_api secure_api DESIGNS secure TIMEOUT 60)
  # Again with mixed families allowed: free, realloc and delete take each
  # other's blocks, and realloc keeps a block's kind.
  ts_preload_test(secure_api_mixed secure_api DESIGNS secure TIMEOUT 60
                  ENV TSALLOC_DEALLOC_MISMATCH=0)
endif()
