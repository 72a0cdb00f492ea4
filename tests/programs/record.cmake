# The trace recorder (tools/recorder, `tsalloc record`) and `tsalloc replay`:
# real programs recorded without a change in their output and replayed by
# memsim under glibc and libtsalloc; exact traces of programs whose
# allocations are known; threads, fork, C++; the installed launcher.
if(TARGET tsalloc-record AND TARGET tsb-memsim AND TARGET tsalloc-tsalloc)
  add_executable(record_known ${CMAKE_CURRENT_LIST_DIR}/record/record_known.c)
  target_link_libraries(record_known PRIVATE Threads::Threads)
  add_executable(record_cxx ${CMAKE_CURRENT_LIST_DIR}/record/record_cxx.cpp)
  add_library(record_plugin MODULE ${CMAKE_CURRENT_LIST_DIR}/record/record_plugin.cpp)
  set_target_properties(record_plugin PROPERTIES PREFIX "" LIBRARY_OUTPUT_DIRECTORY
                                                             ${CMAKE_BINARY_DIR}/tests)
  add_executable(record_plugin_host ${CMAKE_CURRENT_LIST_DIR}/record/record_plugin_host.c)
  target_link_libraries(record_plugin_host PRIVATE ${CMAKE_DL_LIBS})
  foreach(part programs known threads fork cxx plugin install)
    add_test(NAME record_${part}
             COMMAND ${CMAKE_CURRENT_LIST_DIR}/record/record.sh ${part} ${CMAKE_BINARY_DIR}
                     $<TARGET_FILE:record_known> $<TARGET_FILE:record_cxx>
                     $<TARGET_FILE:record_plugin_host> $<TARGET_FILE:record_plugin>)
    set_tests_properties(record_${part} PROPERTIES TIMEOUT 120)
  endforeach()
endif()
