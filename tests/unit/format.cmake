# Every C/C++ file follows the checked-in .clang-format (skipped when
# clang-format is not installed: apt-get install -y clang-format).
find_program(TS_CLANG_FORMAT clang-format)
if(TS_CLANG_FORMAT)
  file(GLOB_RECURSE _ts_format_files CONFIGURE_DEPENDS
       ${PROJECT_SOURCE_DIR}/include/*.h ${PROJECT_SOURCE_DIR}/src/*.c
       ${PROJECT_SOURCE_DIR}/src/*.h ${PROJECT_SOURCE_DIR}/src/*.cpp
       ${PROJECT_SOURCE_DIR}/tests/*.c ${PROJECT_SOURCE_DIR}/tests/*.h
       ${PROJECT_SOURCE_DIR}/tests/*.cpp ${PROJECT_SOURCE_DIR}/bench/*.c
       ${PROJECT_SOURCE_DIR}/bench/*.h)
  add_test(NAME format_check
           COMMAND ${TS_CLANG_FORMAT} --dry-run --Werror ${_ts_format_files}
           WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(format_check PROPERTIES TIMEOUT 120)
endif()
