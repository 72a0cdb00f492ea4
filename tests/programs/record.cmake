# The trace recorder (tools/recorder, `tsalloc record`) and `tsalloc replay`:
# real programs recorded without a change in their output and replayed by
# memsim under glibc and libtsalloc; exact traces of programs whose
# allocations are known; threads, fork, C++; the installed launcher.
if(TARGET tsalloc-record AND TARGET tsb-memsim AND TARGET tsalloc-tsalloc)
  add_executable(record_known ${CMAKE_CURRENT_LIST_DIR}/record/record_known.c)
  target_link_libraries(record_known PRIVATE Threads::Threads)
  add_executable(record_cxx ${CMAKE_CURRENT_LIST_DIR}/record/record_cxx.cpp)
  foreach(part programs known threads fork cxx install)
    add_test(NAME record_${part}
             COMMAND ${CMAKE_CURRENT_LIST_DIR}/record/record.sh ${part} ${CMAKE_BINARY_DIR}
                     $<TARGET_FILE:record_known> $<TARGET_FILE:record_cxx>)
    set_tests_properties(record_${part} PROPERTIES TIMEOUT 120)
  endforeach()
endif()
