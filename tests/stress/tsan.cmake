# ThreadSanitizer over the fast allocator's own code (not possible through
# LD_PRELOAD: TSan must own malloc). Skipped when the compiler cannot build
# and run a -fsanitize=thread program.
if(TARGET tsd_core)
  include(CheckCSourceRuns)
  set(CMAKE_REQUIRED_FLAGS -fsanitize=thread)
  set(CMAKE_REQUIRED_LINK_OPTIONS -fsanitize=thread)
  check_c_source_runs("int main(void) { return 0; }" TS_HAVE_TSAN)
  unset(CMAKE_REQUIRED_FLAGS)
  unset(CMAKE_REQUIRED_LINK_OPTIONS)
  if(TS_HAVE_TSAN)
    # gcc warns that TSan does not model atomic_thread_fence (the core pairs
    # two fences in places); as an error it breaks the build depending on
    # inlining alone.
    include(CheckCCompilerFlag)
    check_c_compiler_flag(-Wno-tsan TS_HAVE_WNO_TSAN)
    set(_tsan_flags -fsanitize=thread -O1 -g)
    if(TS_HAVE_WNO_TSAN)
      list(APPEND _tsan_flags -Wno-tsan)
    endif()
    get_target_property(_core_srcs tsd_core SOURCES)
    get_target_property(_platform_srcs ts_platform SOURCES)
    list(TRANSFORM _platform_srcs PREPEND ${PROJECT_SOURCE_DIR}/)
    # _core_tsan_test(<name> <source> <definition or ""> <args...>): the
    # source built with the core's sources under ThreadSanitizer (the core is
    # then reached through its ts_* names), run as a test.
    function(_core_tsan_test name source definition)
      add_executable(${name} ${CMAKE_CURRENT_LIST_DIR}/${source} ${_core_srcs} ${_platform_srcs})
      target_include_directories(${name} PRIVATE ${TS_TEST_SUPPORT} ${PROJECT_SOURCE_DIR}/src
                                                 ${PROJECT_SOURCE_DIR}/include)
      if(definition)
        target_compile_definitions(${name} PRIVATE ${definition})
      endif()
      target_compile_options(${name} PRIVATE ${_tsan_flags} ${TS_LIB_C_FLAGS})
      target_link_options(${name} PRIVATE -fsanitize=thread)
      target_link_libraries(${name} PRIVATE Threads::Threads)
      add_test(NAME ${name} COMMAND ${name} ${ARGN})
      set_tests_properties(${name} PROPERTIES TIMEOUT 300
        ENVIRONMENT "TSAN_OPTIONS=halt_on_error=1:exitcode=66:second_deadlock_stack=1")
    endfunction()
    _core_tsan_test(core_tsan core_tsan.c "" 4 3 15000)
    # The same with every thread but the first starting on the shared heap
    # (heap.c): its lock, unbatched remote frees into its pages, and purge
    # passes retiring them.
    add_test(NAME core_tsan_shared COMMAND core_tsan 4 3 15000)
    set_tests_properties(core_tsan_shared PROPERTIES TIMEOUT 300 ENVIRONMENT
      "TSALLOC_SHARED_START=1;TSAN_OPTIONS=halt_on_error=1:exitcode=66:second_deadlock_stack=1")
    # The rescue races of core_rescue.c (owners freeing into pages the purge
    # thread holds claimed).
    _core_tsan_test(core_rescue_tsan core_rescue.c RESCUE_TSAN)
    # The sweep's races (core_sweep.c): lists borrowed from pages whose
    # owners wake, free into them and exit.
    _core_tsan_test(core_sweep_tsan core_sweep.c SWEEP_TSAN)
    # First-class heaps (tests/heaps/heap_tsan.c): frees into a heap while its
    # owner allocates and the purge thread purges, then destroy or delete.
    _core_tsan_test(heap_tsan ../heaps/heap_tsan.c "" 6 20000)
  else()
    message(STATUS "ThreadSanitizer unavailable: core_tsan test skipped")
  endif()
endif()
