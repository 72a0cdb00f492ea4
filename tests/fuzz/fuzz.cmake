# Fuzzing (docs/testing.md).
# - ops_fuzz: pseudo-random programs through the malloc of each preloaded
#   design (the override shim's entry points).
# - fuzz_replay_<design>: the design linked in without the shim, the harness
#   of the libFuzzer targets (fuzz_harness.c) replaying tests/fuzz/corpus and
#   then pseudo-random programs, each on the design and on glibc.
# - fuzz_<design> (-DTSALLOC_FUZZ=ON, clang; `make fuzz`): the libFuzzer
#   targets, the design's objects built with -fsanitize=fuzzer-no-link and
#   UBSan so coverage counts the allocator's edges, the harness with ASan.
add_executable(ops_fuzz ${CMAKE_CURRENT_LIST_DIR}/ops_fuzz.c)
target_include_directories(ops_fuzz PRIVATE ${TS_TEST_SUPPORT})
target_link_libraries(ops_fuzz PRIVATE ${CMAKE_DL_LIBS})
add_test(NAME "ops_fuzz[glibc]" COMMAND ops_fuzz 300)
ts_preload_test(ops_fuzz ops_fuzz ARGS 300 7 TIMEOUT 180)

# glibc stays the program's malloc and may move the real break: the designs
# that use the break keep a private one here.
if(TARGET ts_platform_private_break)
  set(TS_FUZZ_PLATFORM ts_platform_private_break)
else()
  set(TS_FUZZ_PLATFORM ts_platform)
endif()
set(TS_FUZZ_DIR ${CMAKE_CURRENT_LIST_DIR})
set(TS_FUZZ_HARNESS ${TS_FUZZ_DIR}/fuzz_harness.c ${TS_FUZZ_DIR}/fuzz_design.c)

foreach(d ${TS_ALL_DESIGNS})
  get_property(cid GLOBAL PROPERTY TS_DESIGN_IDENT_${d})
  add_executable(fuzz_replay_${d} ${TS_FUZZ_DIR}/fuzz_replay.c ${TS_FUZZ_HARNESS}
                 $<TARGET_OBJECTS:tsd_${cid}> $<TARGET_OBJECTS:${TS_FUZZ_PLATFORM}>)
  target_compile_definitions(fuzz_replay_${d} PRIVATE TS_DESIGN=${cid} TS_DESIGN_NAME="${d}")
  target_include_directories(fuzz_replay_${d} PRIVATE ${PROJECT_SOURCE_DIR}/src
                             ${PROJECT_SOURCE_DIR}/include)
  target_link_libraries(fuzz_replay_${d} PRIVATE Threads::Threads)
  add_test(NAME "fuzz_replay[${d}]"
           COMMAND fuzz_replay_${d} ${TS_FUZZ_DIR}/corpus --random 30 7)
  set_tests_properties("fuzz_replay[${d}]" PROPERTIES TIMEOUT 180)
endforeach()
# bestfit-tls under the harness's thread pattern (main frees its live
# workers' blocks): 153 MB from the OS at most over 150 programs; without
# the spill of a heap holding such blocks (bestfit_tls.c), 400 MB after 72.
if(TARGET fuzz_replay_bestfit-tls)
  add_test(NAME "fuzz_growth[bestfit-tls]"
           COMMAND fuzz_replay_bestfit-tls --random 150 7 --max-footprint-mb 400)
  set_tests_properties("fuzz_growth[bestfit-tls]" PROPERTIES TIMEOUT 180)
endif()

option(TSALLOC_FUZZ "Build the libFuzzer targets fuzz_<design> (needs clang)" OFF)
if(TSALLOC_FUZZ)
  # What `make fuzz FUZZ_DESIGN=all` runs.
  list(JOIN TS_ALL_DESIGNS " " names)
  file(WRITE ${PROJECT_BINARY_DIR}/fuzz-designs.txt "${names}\n")
  set(TS_FUZZ_COV -fsanitize=fuzzer-no-link,undefined -fno-sanitize-recover=undefined)
  get_target_property(psrc ${TS_FUZZ_PLATFORM} SOURCES)
  list(TRANSFORM psrc PREPEND ${PROJECT_SOURCE_DIR}/)
  get_target_property(pdefs ${TS_FUZZ_PLATFORM} COMPILE_DEFINITIONS)
  add_library(tsfuzz_platform OBJECT ${psrc})
  target_include_directories(tsfuzz_platform PRIVATE ${PROJECT_SOURCE_DIR}/src
                             ${PROJECT_SOURCE_DIR}/include)
  if(pdefs)
    target_compile_definitions(tsfuzz_platform PRIVATE ${pdefs})
  endif()
  target_compile_options(tsfuzz_platform PRIVATE ${TS_LIB_C_FLAGS} ${TS_FUZZ_COV})
  # The fast allocator's heap walk (ts_heap_check, run by the harness every
  # 16th statistics operation) keeps its edges but not its compares: their
  # callbacks took 60% of fuzz_tsalloc's time and steer nothing.
  set_source_files_properties(${PROJECT_SOURCE_DIR}/src/core/check.c PROPERTIES COMPILE_OPTIONS
                              -fno-sanitize-coverage=trace-cmp)
  foreach(d ${TS_ALL_DESIGNS})
    get_property(cid GLOBAL PROPERTY TS_DESIGN_IDENT_${d})
    # The design's own sources and definitions, rebuilt with coverage.
    get_target_property(srcs tsd_${cid} SOURCES)
    get_target_property(sdir tsd_${cid} SOURCE_DIR)
    get_target_property(defs tsd_${cid} COMPILE_DEFINITIONS)
    set(abs "")
    foreach(s ${srcs})
      cmake_path(ABSOLUTE_PATH s BASE_DIRECTORY ${sdir})
      list(APPEND abs ${s})
    endforeach()
    add_library(tsfuzz_${cid} OBJECT ${abs})
    target_include_directories(tsfuzz_${cid} PRIVATE ${PROJECT_SOURCE_DIR}/src
                               ${PROJECT_SOURCE_DIR}/include)
    if(defs)
      target_compile_definitions(tsfuzz_${cid} PRIVATE ${defs})
    endif()
    target_compile_options(tsfuzz_${cid} PRIVATE ${TS_LIB_C_FLAGS} ${TS_FUZZ_COV})
    add_executable(fuzz_${d} ${TS_FUZZ_DIR}/fuzz_target.c ${TS_FUZZ_HARNESS}
                   $<TARGET_OBJECTS:tsfuzz_${cid}> $<TARGET_OBJECTS:tsfuzz_platform>)
    target_compile_definitions(fuzz_${d} PRIVATE TS_DESIGN=${cid} TS_DESIGN_NAME="${d}")
    target_include_directories(fuzz_${d} PRIVATE ${PROJECT_SOURCE_DIR}/src
                               ${PROJECT_SOURCE_DIR}/include)
    # The harness is not instrumented for coverage: its edges and byte
    # compares (pattern checks) would cost a third of the time and steer
    # nothing in the allocator.
    target_compile_options(fuzz_${d} PRIVATE -fsanitize=address,undefined
                           -fno-sanitize-recover=undefined)
    target_link_options(fuzz_${d} PRIVATE -fsanitize=fuzzer,address,undefined)
    target_link_libraries(fuzz_${d} PRIVATE Threads::Threads)
  endforeach()
endif()
