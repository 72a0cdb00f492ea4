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
    add_executable(core_tsan ${CMAKE_CURRENT_LIST_DIR}/core_tsan.c ${_core_srcs} ${_platform_srcs})
    target_include_directories(core_tsan PRIVATE ${TS_TEST_SUPPORT} ${PROJECT_SOURCE_DIR}/src
                                                 ${PROJECT_SOURCE_DIR}/include)
    target_compile_options(core_tsan PRIVATE ${_tsan_flags} ${TS_LIB_C_FLAGS})
    target_link_options(core_tsan PRIVATE -fsanitize=thread)
    target_link_libraries(core_tsan PRIVATE Threads::Threads)
    add_test(NAME core_tsan COMMAND core_tsan 4 3 15000)
    set_tests_properties(core_tsan PROPERTIES TIMEOUT 300
      ENVIRONMENT "TSAN_OPTIONS=halt_on_error=1:exitcode=66:second_deadlock_stack=1")
    # The rescue races of core_rescue.c (owners freeing into pages the purge
    # thread holds claimed), through the ts_* names.
    add_executable(core_rescue_tsan ${CMAKE_CURRENT_LIST_DIR}/core_rescue.c ${_core_srcs}
                                    ${_platform_srcs})
    target_include_directories(core_rescue_tsan PRIVATE ${TS_TEST_SUPPORT}
                               ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/include)
    target_compile_definitions(core_rescue_tsan PRIVATE RESCUE_TSAN)
    target_compile_options(core_rescue_tsan PRIVATE ${_tsan_flags} ${TS_LIB_C_FLAGS})
    target_link_options(core_rescue_tsan PRIVATE -fsanitize=thread)
    target_link_libraries(core_rescue_tsan PRIVATE Threads::Threads)
    add_test(NAME core_rescue_tsan COMMAND core_rescue_tsan)
    set_tests_properties(core_rescue_tsan PROPERTIES TIMEOUT 300
      ENVIRONMENT "TSAN_OPTIONS=halt_on_error=1:exitcode=66:second_deadlock_stack=1")
    # The sweep's races (core_sweep.c): lists borrowed from pages whose
    # owners wake, free into them and exit.
    add_executable(core_sweep_tsan ${CMAKE_CURRENT_LIST_DIR}/core_sweep.c ${_core_srcs}
                                   ${_platform_srcs})
    target_include_directories(core_sweep_tsan PRIVATE ${TS_TEST_SUPPORT}
                               ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/include)
    target_compile_definitions(core_sweep_tsan PRIVATE SWEEP_TSAN)
    target_compile_options(core_sweep_tsan PRIVATE ${_tsan_flags} ${TS_LIB_C_FLAGS})
    target_link_options(core_sweep_tsan PRIVATE -fsanitize=thread)
    target_link_libraries(core_sweep_tsan PRIVATE Threads::Threads)
    add_test(NAME core_sweep_tsan COMMAND core_sweep_tsan)
    set_tests_properties(core_sweep_tsan PROPERTIES TIMEOUT 300
      ENVIRONMENT "TSAN_OPTIONS=halt_on_error=1:exitcode=66:second_deadlock_stack=1")
  else()
    message(STATUS "ThreadSanitizer unavailable: core_tsan test skipped")
  endif()
endif()
