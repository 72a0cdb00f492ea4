# The layering of src/ (os <- base <- core, designs <- override) and the rule
# that only src/os/ makes memory system calls, checked on the source tree;
# the self-test proves the checker catches each kind of violation.
find_package(Python3 COMPONENTS Interpreter)
if(Python3_Interpreter_FOUND)
  add_test(NAME layering COMMAND ${Python3_EXECUTABLE}
           ${CMAKE_CURRENT_LIST_DIR}/check_layering.py ${PROJECT_SOURCE_DIR})
  add_test(NAME layering_selftest COMMAND ${Python3_EXECUTABLE}
           ${CMAKE_CURRENT_LIST_DIR}/check_layering.py --self-test)
else()
  message(STATUS "python3 not found: the layering tests are left out")
endif()
