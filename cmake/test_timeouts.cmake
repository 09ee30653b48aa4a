# test_timeouts.cmake - every test's time limits scaled by one factor,
# MG_TEST_TIMEOUT_MULTIPLIER: Check's per-case timeouts (tcase_set_timeout
# and CK_DEFAULT_TIMEOUT) through CK_TIMEOUT_MULTIPLIER, which Check reads
# from the environment, and ctest's own TIMEOUT where a test sets one.
# Included last, once every test exists.
#
# Why: the limits are set for a plain build on an idle machine, with room
# to spare. A sanitizer build runs the same cases several times slower
# (the ASan build's test_gradcheck takes 74 s alone against a 120 s
# limit), and on a loaded machine (a load average of 10 on 2 cores) a
# case gets a fraction of a core, so that build timed out where nothing
# was wrong. The multiplier is 5 with MG_SANITIZE, 1 otherwise; set it
# higher for a machine shared with other builds. A hang is still caught,
# only later.
if(NOT MG_BUILD_TESTS)
  return()
endif()
if(MG_SANITIZE)
  set(_mg_timeout_default 5)
else()
  set(_mg_timeout_default 1)
endif()
set(MG_TEST_TIMEOUT_MULTIPLIER "${_mg_timeout_default}" CACHE STRING
    "Factor on every test's time limits (5 with MG_SANITIZE, else 1)")
if(NOT MG_TEST_TIMEOUT_MULTIPLIER MATCHES "^[1-9][0-9]*$")
  message(FATAL_ERROR "MG_TEST_TIMEOUT_MULTIPLIER must be a whole number "
                      "from 1 up, not '${MG_TEST_TIMEOUT_MULTIPLIER}'")
endif()
# Deferred to the end of the directory, after the deferred calls already
# queued (cmake/onednn.cmake adds the *_im2col runs there): a test added
# after this ran would keep its limits unscaled, as test_gradcheck_im2col
# did in a run at load 23, where it timed out.
function(mg_scale_test_timeouts)
  get_property(_mg_tests DIRECTORY "${PROJECT_SOURCE_DIR}" PROPERTY TESTS)
  foreach(_t IN LISTS _mg_tests)
    # Tests that are no Check programs ignore the variable.
    set_property(TEST ${_t} APPEND PROPERTY ENVIRONMENT
                 "CK_TIMEOUT_MULTIPLIER=${MG_TEST_TIMEOUT_MULTIPLIER}")
    get_test_property(${_t} TIMEOUT _mg_limit)
    if(_mg_limit)
      math(EXPR _mg_limit "${_mg_limit} * ${MG_TEST_TIMEOUT_MULTIPLIER}")
      set_tests_properties(${_t} PROPERTIES TIMEOUT ${_mg_limit})
    endif()
  endforeach()
endfunction()
cmake_language(DEFER CALL mg_scale_test_timeouts)
if(NOT MG_TEST_TIMEOUT_MULTIPLIER EQUAL 1)
  message(STATUS "memgrad: test time limits x${MG_TEST_TIMEOUT_MULTIPLIER} "
                 "(MG_TEST_TIMEOUT_MULTIPLIER)")
endif()
unset(_mg_timeout_default)
