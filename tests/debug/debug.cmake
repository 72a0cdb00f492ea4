# Debugging support (docs/debugging.md).
#
# valgrind_memcheck[static] and valgrind_memcheck[<design>]: memcheck with
# tsalloc's malloc kept in place (--soname-synonyms=somalloc=nouserintercepts)
# reports planted leaks, reads after free, overruns and uninitialised reads,
# and nothing for a clean program: linked with libtsalloc.a, preloaded with
# each design, and with Valgrind's own malloc ([glibc], the reference).
find_program(TS_VALGRIND valgrind)
if(TS_VALGRIND)
  # Valgrind must read what this compiler writes with -g (the flags of the
  # top CMakeLists.txt: -gdwarf-4 with clang).
  set(_probe ${CMAKE_CURRENT_BINARY_DIR}/vg_probe)
  file(WRITE ${_probe}.c "#include <stdlib.h>\nint main(void) { free(malloc(1)); return 0; }\n")
  set(_probe_flags -g)
  if(CMAKE_C_COMPILER_ID MATCHES "Clang")
    set(_probe_flags "-g -gdwarf-4")
  endif()
  try_compile(_vg_probe_built ${_probe}.d SOURCES ${_probe}.c
              CMAKE_FLAGS "-DCMAKE_C_FLAGS=${_probe_flags}" COPY_FILE ${_probe})
  set(_vg_probe_rc 1)
  if(_vg_probe_built)
    execute_process(COMMAND ${TS_VALGRIND} -q --error-exitcode=1 ${_probe}
                    RESULT_VARIABLE _vg_probe_rc OUTPUT_QUIET ERROR_QUIET)
  endif()
  if(NOT _vg_probe_rc EQUAL 0)
    message(STATUS "valgrind cannot run a program built here with -g")
    set(TS_VALGRIND "")
  endif()
endif()
if(TS_VALGRIND AND TARGET tsalloc-tsalloc-static)
  add_executable(vg_program ${CMAKE_CURRENT_LIST_DIR}/vg_program.c)
  target_link_libraries(vg_program PRIVATE Threads::Threads)
  add_executable(vg_program_static ${CMAKE_CURRENT_LIST_DIR}/vg_program.c)
  target_link_libraries(vg_program_static PRIVATE tsalloc-tsalloc-static Threads::Threads)
  set(_vg_check ${CMAKE_CURRENT_LIST_DIR}/valgrind_memcheck.sh)
  add_test(NAME "valgrind_memcheck[static]"
           COMMAND sh ${_vg_check} ${TS_VALGRIND} $<TARGET_FILE:vg_program_static>)
  # The reference: Valgrind's own malloc reports the same.
  add_test(NAME "valgrind_memcheck[glibc]"
           COMMAND sh ${_vg_check} ${TS_VALGRIND} $<TARGET_FILE:vg_program>)
  set(_vg_tests "valgrind_memcheck[static]" "valgrind_memcheck[glibc]")
  foreach(d ${TS_ALL_DESIGNS})
    add_test(NAME "valgrind_memcheck[${d}]"
             COMMAND sh ${_vg_check} ${TS_VALGRIND} $<TARGET_FILE:vg_program>
                     $<TARGET_FILE:tsalloc-${d}>)
    list(APPEND _vg_tests "valgrind_memcheck[${d}]")
  endforeach()
  set_tests_properties(${_vg_tests} PROPERTIES TIMEOUT 120 SKIP_RETURN_CODE 77)
else()
  message(STATUS "valgrind not found: valgrind_memcheck tests skipped")
endif()

# ts_heap_check and ts_block_info; the checked build also catches the
# corruptions at its page transitions.
if(TARGET tsalloc-tsalloc-static)
  ts_test(heap_check SOURCES ${CMAKE_CURRENT_LIST_DIR}/heap_check.c
          LIBS tsalloc-tsalloc-static TIMEOUT 60)
endif()
if(TARGET tsalloc-checked-static)
  ts_test(heap_check_checked SOURCES ${CMAKE_CURRENT_LIST_DIR}/heap_check.c
          LIBS tsalloc-checked-static TIMEOUT 60)
  target_compile_definitions(heap_check_checked PRIVATE TS_CHECKED=1)
endif()

# The checked core under the fork and fuzz loads (its stress and exit tests
# are in tests/stress/core_checked.cmake): a broken invariant aborts with
# "tsalloc: assertion failed: ..." or a page check's message.
if(TARGET tsalloc-checked-static)
  ts_test(core_fork_checked SOURCES ${PROJECT_SOURCE_DIR}/tests/stress/core_fork.c
          LIBS tsalloc-checked-static TIMEOUT 120)
  ts_preload_test(ops_fuzz ops_fuzz ARGS 300 7 DESIGNS checked TIMEOUT 180)
  # As fuzz_replay[<design>] (tests/fuzz/fuzz.cmake), on the checked core.
  set(_fz ${PROJECT_SOURCE_DIR}/tests/fuzz)
  set(_fz_platform ts_platform)
  if(TARGET ts_platform_private_break)
    set(_fz_platform ts_platform_private_break)
  endif()
  add_executable(fuzz_replay_checked ${_fz}/fuzz_replay.c ${_fz}/fuzz_harness.c
                 ${_fz}/fuzz_design.c $<TARGET_OBJECTS:tsd_core_checked>
                 $<TARGET_OBJECTS:${_fz_platform}>)
  target_compile_definitions(fuzz_replay_checked PRIVATE TS_DESIGN=core
                             TS_DESIGN_NAME="checked")
  target_include_directories(fuzz_replay_checked PRIVATE ${PROJECT_SOURCE_DIR}/src
                             ${PROJECT_SOURCE_DIR}/include)
  target_link_libraries(fuzz_replay_checked PRIVATE Threads::Threads)
  add_test(NAME "fuzz_replay[checked]"
           COMMAND fuzz_replay_checked ${_fz}/corpus --random 30 7)
  set_tests_properties("fuzz_replay[checked]" PROPERTIES TIMEOUT 180)
endif()

# AddressSanitizer and UndefinedBehaviorSanitizer over the fast allocator's
# own code, as core_tsan does for ThreadSanitizer (tests/stress/tsan.cmake):
# the core's sources and the OS layer built with the sanitizer into the
# program, reached through the ts_* API and the design functions (the
# sanitizer keeps the process malloc). core_<san>: the threaded load of
# core_tsan.c; fuzz_replay_<san>: the fuzz corpus replayed on the core
# against its model. Any report fails the test. Skipped, with a message,
# where the compiler cannot build and run such a program.
if(TARGET tsd_core)
  include(CheckCSourceRuns)
  get_target_property(_san_core tsd_core SOURCES)
  get_target_property(_san_platform ts_platform SOURCES)
  list(TRANSFORM _san_platform PREPEND ${PROJECT_SOURCE_DIR}/)
  set(_fz ${PROJECT_SOURCE_DIR}/tests/fuzz)
  foreach(san address undefined)
    set(CMAKE_REQUIRED_FLAGS -fsanitize=${san})
    set(CMAKE_REQUIRED_LINK_OPTIONS -fsanitize=${san})
    check_c_source_runs("int main(void) { return 0; }" TS_HAVE_SAN_${san})
    unset(CMAKE_REQUIRED_FLAGS)
    unset(CMAKE_REQUIRED_LINK_OPTIONS)
    if(NOT TS_HAVE_SAN_${san})
      message(STATUS "-fsanitize=${san} unavailable: its sanitizer tests skipped")
      continue()
    endif()
    set(_short asan)
    set(_env "ASAN_OPTIONS=halt_on_error=1:exitcode=66:detect_leaks=0:allocator_may_return_null=1")
    if(san STREQUAL "undefined")
      set(_short ubsan)
      set(_env "UBSAN_OPTIONS=halt_on_error=1:exitcode=66:print_stacktrace=1")
    endif()
    set(_flags -fsanitize=${san} -fno-sanitize-recover=all -fno-omit-frame-pointer -O1 -g)
    # The core built once per sanitizer, for both programs.
    add_library(ts_core_${_short} OBJECT ${_san_core} ${_san_platform})
    add_executable(core_${_short} ${PROJECT_SOURCE_DIR}/tests/stress/core_tsan.c
                   $<TARGET_OBJECTS:ts_core_${_short}>)
    add_executable(fuzz_replay_${_short} ${_fz}/fuzz_replay.c ${_fz}/fuzz_harness.c
                   ${_fz}/fuzz_design.c $<TARGET_OBJECTS:ts_core_${_short}>)
    target_compile_definitions(fuzz_replay_${_short} PRIVATE TS_DESIGN=core
                               TS_DESIGN_NAME="tsalloc")
    foreach(t ts_core_${_short} core_${_short} fuzz_replay_${_short})
      target_include_directories(${t} PRIVATE ${TS_TEST_SUPPORT} ${PROJECT_SOURCE_DIR}/src
                                              ${PROJECT_SOURCE_DIR}/include)
      target_compile_options(${t} PRIVATE ${_flags} ${TS_LIB_C_FLAGS})
    endforeach()
    foreach(t core_${_short} fuzz_replay_${_short})
      target_link_options(${t} PRIVATE -fsanitize=${san})
      target_link_libraries(${t} PRIVATE Threads::Threads)
    endforeach()
    add_test(NAME core_${_short} COMMAND core_${_short} 3 2 8000)
    add_test(NAME fuzz_replay_${_short} COMMAND fuzz_replay_${_short} ${_fz}/corpus --random 10 7)
    set_tests_properties(core_${_short} fuzz_replay_${_short} PROPERTIES TIMEOUT 300
                         ENVIRONMENT "${_env}")
  endforeach()
endif()

# gdb_commands: tools/gdb/tsalloc.py's commands in gdb's batch mode on a
# stopped process and on a core file of it (gcore).
find_program(TS_GDB gdb)
if(TS_GDB AND TARGET tsalloc-tsalloc-static)
  add_executable(gdb_target ${CMAKE_CURRENT_LIST_DIR}/gdb_target.c)
  target_link_libraries(gdb_target PRIVATE tsalloc-tsalloc-static Threads::Threads)
  add_test(NAME gdb_commands COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/gdb_commands.sh ${TS_GDB}
                                     $<TARGET_FILE:gdb_target>
                                     ${PROJECT_SOURCE_DIR}/tools/gdb/tsalloc.py)
  set_tests_properties(gdb_commands PROPERTIES TIMEOUT 120 SKIP_RETURN_CODE 77)
else()
  message(STATUS "gdb not found: gdb_commands test skipped")
endif()
