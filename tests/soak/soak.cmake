# Soak (docs/testing.md): tests/soak/soak.c under LD_PRELOAD of each design.
# make soak runs it for minutes a design and checks the memory trend
# (run_soak.sh); make test runs 3 seconds a design without the trend check
# (too few samples for one): threads, fork children and block checks only.
add_executable(soak ${CMAKE_CURRENT_LIST_DIR}/soak.c)
target_include_directories(soak PRIVATE ${TS_TEST_SUPPORT})
target_link_libraries(soak PRIVATE Threads::Threads)
ts_preload_test(soak_short soak ARGS 3 /dev/null notrend TIMEOUT 60)

# What make soak runs: one "name library" line a design.
set(lines "")
foreach(d ${TS_ALL_DESIGNS})
  string(APPEND lines "${d} $<TARGET_FILE:tsalloc-${d}>\n")
endforeach()
file(GENERATE OUTPUT ${PROJECT_BINARY_DIR}/soak-designs.txt CONTENT "${lines}")
