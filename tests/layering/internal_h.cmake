# src/core/internal.h keeps its cross-file declarations under one heading per
# defining file: check_internal_h.py fails when a declaration sits under the
# heading of a file that does not define it.
find_package(Python3 COMPONENTS Interpreter)
if(Python3_Interpreter_FOUND)
  add_test(NAME internal_h_grouping
           COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_LIST_DIR}/check_internal_h.py
                   ${PROJECT_SOURCE_DIR})
  set_tests_properties(internal_h_grouping PROPERTIES TIMEOUT 30)
endif()
