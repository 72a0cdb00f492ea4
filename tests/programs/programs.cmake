# Real programs (ls, sort, gzip, python3, g++, git, ...) under LD_PRELOAD of
# each design, compared with their output under glibc.
get_property(_ts_designs GLOBAL PROPERTY TS_DESIGNS)
foreach(d ${_ts_designs})
  add_test(NAME "programs[${d}]"
           COMMAND ${CMAKE_CURRENT_LIST_DIR}/run_programs.sh $<TARGET_FILE:tsalloc-${d}>)
  set_tests_properties("programs[${d}]" PROPERTIES TIMEOUT 300)
endforeach()

add_test(NAME launcher COMMAND ${CMAKE_CURRENT_LIST_DIR}/launcher.sh ${CMAKE_BINARY_DIR}/bin/tsalloc
                              ${PROJECT_SOURCE_DIR}/src/base/option_list.h)
set_tests_properties(launcher PROPERTIES TIMEOUT 120)

# make install, then build and run clients against the installed copy.
find_program(TS_PKG_CONFIG pkg-config)
if(TS_PKG_CONFIG)
  add_test(NAME install_check COMMAND ${CMAKE_CURRENT_LIST_DIR}/install_check.sh
           ${CMAKE_BINARY_DIR} ${PROJECT_SOURCE_DIR})
  set_tests_properties(install_check PROPERTIES TIMEOUT 120)
endif()

# The CMake package (find_package from a consumer project) and the Debian
# package of `make deb` (skipped without dpkg-deb).
foreach(part cmake deb)
  add_test(NAME package_${part} COMMAND ${CMAKE_CURRENT_LIST_DIR}/package_check.sh ${part}
           ${CMAKE_BINARY_DIR} ${PROJECT_SOURCE_DIR})
  set_tests_properties(package_${part} PROPERTIES TIMEOUT 180 SKIP_REGULAR_EXPRESSION "SKIP: ")
endforeach()

# tsalloc compare (tsbench's runner on a user's command and on a recorded trace).
find_program(TS_PYTHON3 python3)
if(TS_PYTHON3 AND TARGET tsb-memsim AND TARGET tsalloc-record AND TARGET tsalloc-bins)
  foreach(part command trace)
    add_test(NAME compare_${part} COMMAND ${CMAKE_CURRENT_LIST_DIR}/compare.sh ${part}
             ${CMAKE_BINARY_DIR})
    set_tests_properties(compare_${part} PROPERTIES TIMEOUT 120)
  endforeach()
endif()
