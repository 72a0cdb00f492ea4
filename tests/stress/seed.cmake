# The seed 001 thread tests, written for tsalloc, for both versions
# (lock = bestfit, nolock = bestfit-tls) and several thread counts, linked
# with libtsalloc-classic.a as the seeds' programs are (so the designs grow
# its private break beside glibc's malloc); and a quick run of the seed
# measurement program (tsb-measurement) under LD_PRELOAD of each design and
# with glibc.
if(TARGET tsalloc-classic-static)
  foreach(prog seed_thread_test seed_thread_test_malloc_free
               seed_thread_test_malloc_free_change_thread seed_thread_test_measurement)
    add_executable(${prog} ${CMAKE_CURRENT_LIST_DIR}/${prog}.c)
    target_include_directories(${prog} PRIVATE ${TS_TEST_SUPPORT} ${PROJECT_SOURCE_DIR}/include
                                               ${PROJECT_SOURCE_DIR}/src)
    target_link_libraries(${prog} PRIVATE tsalloc-classic-static Threads::Threads)
    set(counts 2 4 8)
    if(prog STREQUAL seed_thread_test_measurement)
      set(counts 1 2 3 4 8) # odd counts: the last thread frees thread 0's blocks
    endif()
    foreach(mode lock nolock)
      foreach(threads ${counts})
        add_test(NAME "${prog}[${mode},${threads}]" COMMAND ${prog} ${mode} ${threads})
        set_tests_properties("${prog}[${mode},${threads}]" PROPERTIES TIMEOUT 60)
      endforeach()
    endforeach()
  endforeach()
  # Which break the classic library grows: its private one by default, the
  # program's with TSALLOC_CLASSIC_BREAK=sbrk (sbrk(0) then sees the segment).
  add_executable(seed_classic_break ${CMAKE_CURRENT_LIST_DIR}/seed_classic_break.c)
  target_include_directories(seed_classic_break PRIVATE ${TS_TEST_SUPPORT}
                             ${PROJECT_SOURCE_DIR}/include ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(seed_classic_break PRIVATE tsalloc-classic-static Threads::Threads)
  foreach(mode lock nolock)
    foreach(setting default private)
      add_test(NAME "seed_classic_break[${mode},${setting}]"
               COMMAND seed_classic_break ${mode} 4 private)
    endforeach()
    add_test(NAME "seed_classic_break[${mode},sbrk]" COMMAND seed_classic_break ${mode} 4 sbrk)
    set_tests_properties("seed_classic_break[${mode},default]" PROPERTIES TIMEOUT 60)
    set_tests_properties("seed_classic_break[${mode},private]" PROPERTIES TIMEOUT 60
                         ENVIRONMENT TSALLOC_CLASSIC_BREAK=private)
    set_tests_properties("seed_classic_break[${mode},sbrk]" PROPERTIES TIMEOUT 60
                         ENVIRONMENT TSALLOC_CLASSIC_BREAK=sbrk)
  endforeach()
  # The seed measurement with the futex mutex and the spin lock (TSALLOC_LOCK).
  foreach(kind futex spin)
    foreach(mode lock nolock)
      set(test "seed_thread_test_measurement[${mode},4,TSALLOC_LOCK=${kind}]")
      add_test(NAME ${test} COMMAND seed_thread_test_measurement ${mode} 4)
      set_tests_properties(${test} PROPERTIES TIMEOUT 60 ENVIRONMENT TSALLOC_LOCK=${kind})
    endforeach()
  endforeach()
endif()

if(TARGET tsb-measurement AND TARGET tsalloc-bestfit AND TARGET tsalloc-bestfit-tls)
  set(args --threads 4 --blocks 3000 --runs 2)
  add_test(NAME "seed_measurement[bestfit,lock]" COMMAND tsb-measurement --api lock ${args})
  set_tests_properties("seed_measurement[bestfit,lock]" PROPERTIES ENVIRONMENT
    "LD_PRELOAD=$<TARGET_FILE:tsalloc-bestfit>;TSALLOC_EXPECT_DESIGN=bestfit")
  add_test(NAME "seed_measurement[bestfit-tls,nolock]" COMMAND tsb-measurement --api nolock ${args})
  set_tests_properties("seed_measurement[bestfit-tls,nolock]" PROPERTIES ENVIRONMENT
    "LD_PRELOAD=$<TARGET_FILE:tsalloc-bestfit-tls>;TSALLOC_EXPECT_DESIGN=bestfit-tls")
  foreach(d bestfit bestfit-tls)
    add_test(NAME "seed_measurement[${d},malloc]" COMMAND tsb-measurement --api malloc ${args})
    set_tests_properties("seed_measurement[${d},malloc]" PROPERTIES ENVIRONMENT
      "LD_PRELOAD=$<TARGET_FILE:tsalloc-${d}>;TSALLOC_EXPECT_DESIGN=${d}")
  endforeach()
  if(TARGET tsalloc-classic)
    add_test(NAME "seed_measurement[classic,lock]" COMMAND tsb-measurement --api lock --threads 3
             --blocks 2000)
    set_tests_properties("seed_measurement[classic,lock]" PROPERTIES TIMEOUT 60 ENVIRONMENT
      "LD_PRELOAD=$<TARGET_FILE:tsalloc-classic>")
  endif()
  add_test(NAME "seed_measurement[glibc,malloc]" COMMAND tsb-measurement --api malloc ${args})
  set_tests_properties("seed_measurement[bestfit,lock]" "seed_measurement[bestfit-tls,nolock]"
    "seed_measurement[bestfit,malloc]" "seed_measurement[bestfit-tls,malloc]"
    "seed_measurement[glibc,malloc]" PROPERTIES TIMEOUT 60
    PASS_REGULAR_EXPRESSION "measurement: api=[a-z]+ threads=4 time_s=[0-9.]+ data_segment_bytes=[0-9a-z]+ live_bytes=[0-9]+ .* ok"
    FAIL_REGULAR_EXPRESSION "FAILED")
  # Without the preload, --api lock fails with the documented line.
  add_test(NAME "seed_measurement[glibc,lock-absent]" COMMAND tsb-measurement --api lock)
  set_tests_properties("seed_measurement[glibc,lock-absent]" PROPERTIES TIMEOUT 60
    PASS_REGULAR_EXPRESSION "^measurement: FAILED ts_malloc_lock not found")
endif()
