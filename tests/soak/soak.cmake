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

# The pass/fail rule of make soak (soak --check) over made-up CSVs, and
# the plot over a small one (skipped without matplotlib: make venv).
add_test(NAME soak_check COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/soak_check.sh $<TARGET_FILE:soak>
                                 ${CMAKE_CURRENT_BINARY_DIR}/soak_check)
find_package(Python3 COMPONENTS Interpreter)
if(Python3_Interpreter_FOUND)
  add_test(NAME soak_plot COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_LIST_DIR}/soak_plot_test.py
                                  ${CMAKE_CURRENT_LIST_DIR}/soak_plot.py ${PROJECT_SOURCE_DIR}/.venv
                                  ${CMAKE_CURRENT_BINARY_DIR}/soak_plot)
  set_tests_properties(soak_plot PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 120)
endif()
set_tests_properties(soak_check PROPERTIES TIMEOUT 60)
