# dlc_ctest(EXE SRC LIB...): the C test SRC (a ctest/*.c) built as EXE, linked with the
# LIBs and registered as c_<SRC's name>, under the timeout and environment of every C test.
# It sees the headers its LIBs give; a test of the internals adds the core's and ctest/'s
# (check.h), as dlc_ctests does.
function(dlc_ctest exe src)
  get_filename_component(name ${src} NAME_WE)
  add_executable(${exe} ${src})
  target_link_libraries(${exe} PRIVATE ${ARGN})
  add_test(NAME c_${name} COMMAND ${exe})
  set_tests_properties(c_${name} PROPERTIES TIMEOUT 300 ENVIRONMENT "OPENBLAS_NUM_THREADS=1")
endfunction()

# dlc_ctests(PATTERN LIB): each ctest/PATTERN file a C test of LIB and the internals, the
# executable test_<name>: the transport's (net_*.c) and the drivers' (rt_*.c).
function(dlc_ctests pattern lib)
  file(GLOB srcs CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/ctest/${pattern})
  foreach(src ${srcs})
    get_filename_component(name ${src} NAME_WE)
    dlc_ctest(test_${name} ${src} ${lib})
    target_include_directories(test_${name} PRIVATE ${CMAKE_SOURCE_DIR}/core ${CMAKE_SOURCE_DIR}/ctest)
  endforeach()
endfunction()
