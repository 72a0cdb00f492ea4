# Unit tests of the bestfit and bestfit-tls designs (src/designs/bestfit*).
# They link libtsalloc-classic.a, so glibc stays the process malloc (and moves
# the break too), and reach the designs' hidden functions and debug hooks.
# Each file takes the design as argv[1]: lock (bestfit) or nolock (bestfit-tls).
if(TARGET tsalloc-classic-static)
  function(ts_bestfit_unit name)
    cmake_parse_arguments(B "" "" "ARGS;ENV" ${ARGN})
    if(NOT TARGET ${name})
      add_executable(${name} ${CMAKE_CURRENT_LIST_DIR}/${name}.c)
      target_include_directories(${name} PRIVATE ${TS_TEST_SUPPORT} ${PROJECT_SOURCE_DIR}/include
                                                 ${PROJECT_SOURCE_DIR}/src)
      target_link_libraries(${name} PRIVATE tsalloc-classic-static Threads::Threads)
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
  ts_test(bestfit_tls_handover SOURCES ${CMAKE_CURRENT_LIST_DIR}/bestfit_tls_handover.c
          LIBS tsalloc-classic-static TIMEOUT 60 ENV TSALLOC_BESTFIT_TRIM_THRESHOLD=-1)

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
