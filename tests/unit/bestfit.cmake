# Unit tests of the bestfit and bestfit-tls designs (src/designs/bestfit*).
# They link the objects of libtsalloc-classic but with the real break's OS
# layer (ts_platform, as in the preloaded libraries; the classic library keeps
# a private break): glibc stays the process malloc and moves the same break,
# and the tests move it too. They reach the designs' hidden functions and
# debug hooks. Each file takes the design as argv[1]: lock (bestfit) or
# nolock (bestfit-tls).
if(TARGET tsalloc-classic-static)
  set(TS_BESTFIT_SYSBRK_OBJS tsd_bestfit tsd_bestfit_tls ts_classic_fork ts_platform)
  function(ts_bestfit_unit name)
    cmake_parse_arguments(B "" "" "ARGS;ENV" ${ARGN})
    if(NOT TARGET ${name})
      add_executable(${name} ${CMAKE_CURRENT_LIST_DIR}/${name}.c)
      target_include_directories(${name} PRIVATE ${TS_TEST_SUPPORT} ${PROJECT_SOURCE_DIR}/include
                                                 ${PROJECT_SOURCE_DIR}/src)
      target_link_libraries(${name} PRIVATE ${TS_BESTFIT_SYSBRK_OBJS} Threads::Threads)
    endif()
    foreach(mode lock nolock)
      set(test "${name}[${mode}${B_SUFFIX}]")
      add_test(NAME ${test} COMMAND ${name} ${mode} ${B_ARGS})
      set_tests_properties(${test} PROPERTIES TIMEOUT 60 ENVIRONMENT "${B_ENV}")
    endforeach()
  endfunction()

  set(B_SUFFIX "")
  ts_bestfit_unit(bestfit_split)
  ts_bestfit_unit(bestfit_coalesce)
  ts_bestfit_unit(bestfit_trim)
  ts_bestfit_unit(bestfit_accounting)
  ts_bestfit_unit(bestfit_reference)
  ts_bestfit_unit(bestfit_oom)
  ts_bestfit_unit(bestfit_api)
  ts_bestfit_unit(bestfit_misuse)
  ts_bestfit_unit(bestfit_mapped ENV TSALLOC_BESTFIT_TRIM_THRESHOLD=-1)
  ts_test(bestfit_tls_handover SOURCES ${CMAKE_CURRENT_LIST_DIR}/bestfit_tls_handover.c
          LIBS tsalloc-classic-static TIMEOUT 60 ENV TSALLOC_BESTFIT_TRIM_THRESHOLD=-1)
  ts_test(bestfit_tls_churn SOURCES ${CMAKE_CURRENT_LIST_DIR}/bestfit_tls_churn.c
          LIBS tsalloc-classic-static TIMEOUT 60)
  ts_test(bestfit_tls_large SOURCES ${CMAKE_CURRENT_LIST_DIR}/bestfit_tls_large.c
          LIBS tsalloc-classic-static TIMEOUT 60 ENV TSALLOC_BESTFIT_TRIM_THRESHOLD=-1)

  # The real break blocked by a mapping, under LD_PRELOAD of each design.
  add_executable(bestfit_brkblock ${CMAKE_CURRENT_LIST_DIR}/bestfit_brkblock.c)
  target_include_directories(bestfit_brkblock PRIVATE ${TS_TEST_SUPPORT})
  target_link_libraries(bestfit_brkblock PRIVATE ${CMAKE_DL_LIBS})
  ts_preload_test(bestfit_brkblock bestfit_brkblock DESIGNS bestfit bestfit-tls TIMEOUT 30)

  # Regression tests (bestfit_regress.c lists them): on libtsalloc-classic.a
  # (private break, fork handlers), and odd_break again on the real break.
  foreach(variant bestfit_regress bestfit_regress_sysbrk)
    add_executable(${variant} ${CMAKE_CURRENT_LIST_DIR}/bestfit_regress.c)
    target_include_directories(${variant} PRIVATE ${TS_TEST_SUPPORT} ${PROJECT_SOURCE_DIR}/include
                                                  ${PROJECT_SOURCE_DIR}/src)
    target_link_options(${variant} PRIVATE "LINKER:--wrap=_ts_os_sbrk,--wrap=pthread_mutex_lock")
  endforeach()
  target_link_libraries(bestfit_regress PRIVATE tsalloc-classic-static Threads::Threads)
  target_link_libraries(bestfit_regress_sysbrk PRIVATE ${TS_BESTFIT_SYSBRK_OBJS} Threads::Threads)
  set(regress_tests "bestfit_regress[private_break]")
  add_test(NAME "bestfit_regress[private_break]" COMMAND bestfit_regress lock private_break)
  foreach(mode lock nolock)
    foreach(case calloc odd_break fork glibc_sbrk brk_blocked untouched)
      add_test(NAME "bestfit_regress[${mode},${case}]" COMMAND bestfit_regress ${mode} ${case})
      list(APPEND regress_tests "bestfit_regress[${mode},${case}]")
    endforeach()
    add_test(NAME "bestfit_regress[${mode},odd_break,sysbrk]"
             COMMAND bestfit_regress_sysbrk ${mode} odd_break)
    list(APPEND regress_tests "bestfit_regress[${mode},odd_break,sysbrk]")
  endforeach()
  set_tests_properties(${regress_tests} PROPERTIES TIMEOUT 30)

  # The tunables: another split minimum, the give-back switched off.
  set(B_SUFFIX ",min_split=100")
  ts_bestfit_unit(bestfit_split ENV TSALLOC_BESTFIT_MIN_SPLIT=100)
  ts_bestfit_unit(bestfit_reference ARGS 15000 7 ENV TSALLOC_BESTFIT_MIN_SPLIT=100)
  set(B_SUFFIX ",never")
  ts_bestfit_unit(bestfit_trim ARGS never ENV TSALLOC_BESTFIT_TRIM_THRESHOLD=-1)
  set(B_SUFFIX ",small_chunks")
  ts_bestfit_unit(bestfit_reference ARGS 15000 11 ENV TSALLOC_BESTFIT_GROW_CHUNK=4096)
  set(B_SUFFIX "")
endif()
