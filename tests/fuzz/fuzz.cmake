# Fuzzing: a deterministic driver for ctest under every design, and an
# optional libFuzzer target (clang) for open-ended runs:
#   cmake -B build-fuzz -DCMAKE_C_COMPILER=clang -DTSALLOC_LIBFUZZER=ON
#   LD_PRELOAD=build-fuzz/lib/libtsalloc.so build-fuzz/bin/ops_libfuzzer -max_total_time=60
add_executable(ops_fuzz ${CMAKE_CURRENT_LIST_DIR}/ops_fuzz.c)
target_include_directories(ops_fuzz PRIVATE ${TS_TEST_SUPPORT})
target_link_libraries(ops_fuzz PRIVATE ${CMAKE_DL_LIBS})
add_test(NAME "ops_fuzz[glibc]" COMMAND ops_fuzz 300)
ts_preload_test(ops_fuzz ops_fuzz ARGS 300 7 TIMEOUT 180)

option(TSALLOC_LIBFUZZER "Build the libFuzzer target (needs clang)" OFF)
if(TSALLOC_LIBFUZZER)
  add_executable(ops_libfuzzer ${CMAKE_CURRENT_LIST_DIR}/ops_fuzz.c)
  target_include_directories(ops_libfuzzer PRIVATE ${TS_TEST_SUPPORT})
  target_compile_definitions(ops_libfuzzer PRIVATE TS_LIBFUZZER)
  target_compile_options(ops_libfuzzer PRIVATE -fsanitize=fuzzer)
  target_link_options(ops_libfuzzer PRIVATE -fsanitize=fuzzer)
endif()
