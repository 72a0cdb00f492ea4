# tsbench (bench/): every workload in a tiny configuration under glibc and
# under every tsalloc design, with its result line checked (a crash, a FAILED
# line or a missing "<name>: ... ok" line fails the test); the runner's unit
# tests on fake allocators; and a --quick run of the real runner.
#
# Under ts_preload_test the workloads also check that malloc really comes
# from a tsalloc library (TSALLOC_EXPECT_DESIGN), so a preload that did not
# take effect cannot pass on glibc.

set(_tsb_trace ${CMAKE_CURRENT_BINARY_DIR}/bench_quick.trace)

# _tsb_check(<test name> <workload>): the result line must be there and ok.
function(_tsb_check test wl)
  set_tests_properties("${test}" PROPERTIES
    PASS_REGULAR_EXPRESSION "(^|\n)${wl}: [^\n]* ok(\n|$)"
    FAIL_REGULAR_EXPRESSION "FAILED;tsalloc: ")
endfunction()

# _tsb_workload_as(<name> <workload> <args...>): tests bench_<name>[glibc]
# and one per design, running the workload's program with these arguments.
function(_tsb_workload_as name wl)
  if(NOT TARGET tsb-${wl})
    return()
  endif()
  add_test(NAME "bench_${name}[glibc]" COMMAND tsb-${wl} ${ARGN})
  set_tests_properties("bench_${name}[glibc]" PROPERTIES TIMEOUT 60)
  _tsb_check("bench_${name}[glibc]" ${wl})
  ts_preload_test(bench_${name} tsb-${wl} ARGS ${ARGN} TIMEOUT 60)
  foreach(d ${TS_ALL_DESIGNS})
    _tsb_check("bench_${name}[${d}]" ${wl})
  endforeach()
endfunction()

# _tsb_workload(<workload> <args...>): one test on glibc, one per design.
function(_tsb_workload wl)
  _tsb_workload_as(${wl} ${wl} ${ARGN})
endfunction()

_tsb_workload(lecture1 --threads 4 --iters 2000)
# The untagged loop (lecture1-bare): the line says it ran untagged, with the
# bytes the arguments give (each block is only allocated and freed there, so
# the designs' tests catch a crash, a NULL or a wrong count).
if(TARGET tsb-lecture1)
  add_test(NAME "bench_lecture1_bare[glibc]" COMMAND tsb-lecture1 --threads 4 --iters 2000 --tags 0)
  set_tests_properties("bench_lecture1_bare[glibc]" PROPERTIES TIMEOUT 60
    PASS_REGULAR_EXPRESSION "(^|\n)lecture1: [^\n]*tags=0 [^\n]* check=2067712 [^\n]* ok(\n|$)"
    FAIL_REGULAR_EXPRESSION "FAILED")
  ts_preload_test(bench_lecture1_bare tsb-lecture1 ARGS --threads 4 --iters 2000 --tags 0 TIMEOUT 60)
  foreach(d ${TS_ALL_DESIGNS})
    set_tests_properties("bench_lecture1_bare[${d}]" PROPERTIES
      PASS_REGULAR_EXPRESSION "(^|\n)lecture1: [^\n]*tags=0 [^\n]* check=2067712 [^\n]* ok(\n|$)"
      FAIL_REGULAR_EXPRESSION "FAILED;tsalloc: ")
  endforeach()
endif()
_tsb_workload(lecture2 --pairs 2 --batches 4 --batch 64 --ring 256)
# lecture2 with fixed placement (--pin): each of the 6 threads checks it runs
# on its CPU, and the result line counts them.
if(TARGET tsb-lecture2)
  foreach(pin pair split)
    add_test(NAME "bench_lecture2_pin_${pin}[glibc]"
             COMMAND tsb-lecture2 --pairs 3 --batches 4 --batch 64 --ring 256 --pin ${pin})
    set_tests_properties("bench_lecture2_pin_${pin}[glibc]" PROPERTIES TIMEOUT 60
      PASS_REGULAR_EXPRESSION "(^|\n)lecture2: [^\n]*pinned=6 [^\n]* ok(\n|$)"
      FAIL_REGULAR_EXPRESSION "FAILED")
  endforeach()
  add_test(NAME "bench_lecture2_pin_bad[glibc]" COMMAND tsb-lecture2 --pin sideways)
  set_tests_properties("bench_lecture2_pin_bad[glibc]" PROPERTIES TIMEOUT 60 WILL_FAIL TRUE)
endif()
_tsb_workload(measurement --api malloc --threads 2 --blocks 500)
_tsb_workload(collatz-ivec --threads 2 --count 300)
_tsb_workload(collatz-list --threads 2 --count 100)
_tsb_workload(server --threads 2 --slots 100 --rounds 3 --ops 500)
# churn: enough waves that an allocator which cannot reuse a dead thread's
# memory grows by about 16 MiB over the second half (measured with the floor allocator,
# which loses a dead thread's free lists); tsalloc 150-570 KiB; 2 MiB is the bound.
_tsb_workload(churn --threads 2 --waves 200 --blocks 200 --max-growth-kb 2048)
# server-many: server at 16 threads.
_tsb_workload_as(server_many server --threads 16 --slots 100 --rounds 2 --ops 200)
# exchange: a few large and huge blocks and realloc-grown ones even at this size.
_tsb_workload(exchange --threads 2 --rounds 3 --objects 300 --keep 100 --large-ppm 20000
              --huge-ppm 5000 --grow-pct 20)
_tsb_workload(thread-overhead --threads 100)
# startup and exec-chain start themselves again: the children inherit
# LD_PRELOAD and TSALLOC_EXPECT_DESIGN, and must use the parent's malloc.
_tsb_workload(startup --runs 10)
_tsb_workload(exec-chain --stages 3 --reps 2 --records 50)
_tsb_workload(malloc-large --buffers 4 --iters 10 --min-mb 1 --max-mb 2)
_tsb_workload(idle-owner --mb 4 --wait-ms 0)
# idle-owner-keep: big blocks written whole, main keeps every 8th (checked
# after the wait).
_tsb_workload_as(idle_owner_keep idle-owner --mb 8 --min 16384 --max 409600 --keep 8 --touch 1
                 --wait-ms 0)
_tsb_workload(xthread --producers 1 --consumers 2 --blocks 4096 --batch 64 --depth 4)
# xthread-big and xthread-large: big-class and large blocks handed over.
_tsb_workload_as(xthread_big xthread --producers 2 --consumers 2 --blocks 64 --batch 4 --depth 2
                 --min 196608 --max 327680)
_tsb_workload_as(xthread_large xthread --producers 2 --consumers 2 --blocks 32 --batch 2
                 --depth 1 --min 1048576 --max 1153434)
_tsb_workload(false-sharing --threads 2 --rounds 10 --writes 1000)
_tsb_workload(fragmentation --small 5000)
_tsb_workload(midsize --threads 2 --slots 8 --ops 2000)
_tsb_workload(arena --objects 2000 --rounds 3)
# arena-heap: only the fast allocator has a heap API (ts_heap_*).
if(TARGET tsb-arena AND TARGET tsalloc-tsalloc)
  ts_preload_test(bench_arena_heap tsb-arena ARGS --objects 2000 --rounds 3 --api heap
                  DESIGNS tsalloc TIMEOUT 60)
  set_tests_properties("bench_arena_heap[tsalloc]" PROPERTIES
    PASS_REGULAR_EXPRESSION "(^|\n)arena: api=ts_heap [^\n]* ok(\n|$)"
    FAIL_REGULAR_EXPRESSION "FAILED;tsalloc: ")
endif()
_tsb_workload(large --max-mb 4 --blocks 4 --max-block-mb 2 --live 2)
_tsb_workload(fastpath --iters 20000 --warmup 100)
# fastpath-big: the same program at 256 KiB (big classes, large blocks in the designs).
if(TARGET tsb-fastpath)
  add_test(NAME "bench_fastpath_big[glibc]"
           COMMAND tsb-fastpath --iters 2000 --warmup 100 --sizes 262144)
  set_tests_properties("bench_fastpath_big[glibc]" PROPERTIES TIMEOUT 60
    PASS_REGULAR_EXPRESSION "(^|\n)fastpath: [^\n]*ns_262144=[^\n]* check=2000 [^\n]* ok(\n|$)"
    FAIL_REGULAR_EXPRESSION "FAILED")
  ts_preload_test(bench_fastpath_big tsb-fastpath ARGS --iters 2000 --warmup 100 --sizes 262144
                  TIMEOUT 60)
  foreach(d ${TS_ALL_DESIGNS})
    _tsb_check("bench_fastpath_big[${d}]" fastpath)
  endforeach()
endif()

# memsim replays a trace that gentrace writes first (a ctest fixture).
if(TARGET tsb-gentrace AND TARGET tsb-memsim)
  add_test(NAME "bench_gentrace[glibc]"
           COMMAND tsb-gentrace --ops 2000 --slots 200 --out ${_tsb_trace})
  set_tests_properties("bench_gentrace[glibc]" PROPERTIES TIMEOUT 60
                       FIXTURES_SETUP bench_trace)
  _tsb_check("bench_gentrace[glibc]" gentrace)
  add_test(NAME "bench_gentrace_lifo[glibc]"
           COMMAND tsb-gentrace --ops 500 --slots 50 --size log:1:70000 --life lifo:40
                   --realloc-pct 20 --calloc-pct 20 --out ${_tsb_trace}.lifo)
  set_tests_properties("bench_gentrace_lifo[glibc]" PROPERTIES TIMEOUT 60
                       FIXTURES_SETUP bench_trace)
  _tsb_check("bench_gentrace_lifo[glibc]" gentrace)

  _tsb_workload(memsim --trace ${_tsb_trace} --threads 2 --repeats 2)
  add_test(NAME "bench_memsim_lifo[glibc]"
           COMMAND tsb-memsim --trace ${_tsb_trace}.lifo --threads 3 --repeats 2)
  set_tests_properties("bench_memsim_lifo[glibc]" PROPERTIES TIMEOUT 60)
  _tsb_check("bench_memsim_lifo[glibc]" memsim)
  set(_tsb_memsim_tests "bench_memsim[glibc]" "bench_memsim_lifo[glibc]")
  foreach(d ${TS_ALL_DESIGNS})
    list(APPEND _tsb_memsim_tests "bench_memsim[${d}]")
  endforeach()
  set_tests_properties(${_tsb_memsim_tests} PROPERTIES FIXTURES_REQUIRED bench_trace)

  # A malformed trace is an error with its line number, not a crash.
  file(WRITE ${CMAKE_CURRENT_BINARY_DIR}/bench_bad.trace "tstrace 1\nm 0 16\nf 1\n")
  add_test(NAME "bench_memsim_bad_trace[glibc]"
           COMMAND tsb-memsim --trace ${CMAKE_CURRENT_BINARY_DIR}/bench_bad.trace)
  set_tests_properties("bench_memsim_bad_trace[glibc]" PROPERTIES TIMEOUT 60
    PASS_REGULAR_EXPRESSION "memsim: FAILED [^\n]*bench_bad.trace:3: free of empty slot 1")
endif()

# The harness floor (bench/floor) runs the workloads it is meant for, and the
# result line must name it as malloc, so a preload that did not take effect
# fails.
if(TARGET tsb-floor)
  foreach(spec "lecture1;--threads;4;--iters;2000" "fastpath;--iters;20000;--warmup;100"
               "server;--threads;2;--slots;100;--rounds;3;--ops;500")
    list(GET spec 0 wl)
    list(SUBLIST spec 1 -1 wl_args)
    add_test(NAME "bench_${wl}[floor]" COMMAND tsb-${wl} ${wl_args})
    set_tests_properties("bench_${wl}[floor]" PROPERTIES TIMEOUT 60
      ENVIRONMENT "LD_PRELOAD=$<TARGET_FILE:tsb-floor>"
      PASS_REGULAR_EXPRESSION "(^|\n)${wl}: [^\n]*malloc_from=[^ ]*libtsb-floor.so ok"
      FAIL_REGULAR_EXPRESSION "FAILED")
  endforeach()
endif()

find_package(Python3 COMPONENTS Interpreter)
if(Python3_Interpreter_FOUND AND TARGET tsbench-exec)
  # The tsbench package (bench/tsbench/) on fake workloads and fake allocators
  # (no matplotlib, no network): every bench/tests/test_*.py. A run that
  # finds no test fails.
  add_test(NAME tsbench_unit
           COMMAND ${Python3_EXECUTABLE} -m unittest discover -v -s . -p "test_*.py"
           WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}/bench/tests)
  set_tests_properties(tsbench_unit PROPERTIES TIMEOUT 180
    FAIL_REGULAR_EXPRESSION "(^|\n)Ran 0 tests"
    ENVIRONMENT "TSBENCH_EXEC=$<TARGET_FILE:tsbench-exec>;PYTHONDONTWRITEBYTECODE=1")

  # The real runner over every workload, quick sizes, glibc and the peers that
  # are installed, started as `python3 bench/tsbench` (the package folder run
  # as a script, as make bench does); --strict fails the test if any cell is
  # not ok.
  add_test(NAME tsbench_quick
           COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/bench/tsbench
                   --build ${PROJECT_BINARY_DIR} --quick --strict --no-plots --callgrind off
                   --min-timeout 30
                   --allocators glibc,jemalloc,tcmalloc,mimalloc
                   --out ${CMAKE_CURRENT_BINARY_DIR}/tsbench_quick)
  set_tests_properties(tsbench_quick PROPERTIES TIMEOUT 180
    ENVIRONMENT "PYTHONDONTWRITEBYTECODE=1")
endif()
