# dlc_check_submodules(SOURCE_DIR): fails configure naming each git submodule that
# SOURCE_DIR/.gitmodules lists and that is not checked out (an empty or missing
# directory), with the command that fetches it.  diloco itself has no submodules today,
# so on this tree it checks nothing; it is here so that adding one can never produce a
# half-configured build that fails later with a missing header.
# Also runnable as a script: cmake -DSOURCE_DIR=DIR -P cmake/check_submodules.cmake
function(dlc_check_submodules src)
  if(NOT EXISTS "${src}/.gitmodules")
    return()
  endif()
  file(STRINGS "${src}/.gitmodules" lines REGEX "^[ \t]*path[ \t]*=")
  set(missing "")
  foreach(line IN LISTS lines)
    string(REGEX REPLACE "^[ \t]*path[ \t]*=[ \t]*" "" path "${line}")
    string(STRIP "${path}" path)
    file(GLOB content "${src}/${path}/*")
    if(NOT content)
      list(APPEND missing "${path}")
    endif()
  endforeach()
  if(missing)
    list(JOIN missing " " names)
    message(FATAL_ERROR "git submodule not checked out: ${names} (listed in ${src}/.gitmodules, "
                        "but empty or missing); run: git submodule update --init ${names}")
  endif()
endfunction()

if(CMAKE_SCRIPT_MODE_FILE AND DEFINED SOURCE_DIR)
  dlc_check_submodules("${SOURCE_DIR}")
  message(STATUS "submodules of ${SOURCE_DIR}: all checked out")
endif()
