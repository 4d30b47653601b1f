# Configure and build in one command, for a build step whose argv is
# ["cmake", "-P", "build.cmake"]: cmake -S . -B build, then cmake --build build.
# The parallelism comes from CMAKE_BUILD_PARALLEL_LEVEL in the environment.
execute_process(
  COMMAND "${CMAKE_COMMAND}" -S "${CMAKE_CURRENT_LIST_DIR}" -B "${CMAKE_CURRENT_LIST_DIR}/build"
  RESULT_VARIABLE configure_result)
if(NOT configure_result EQUAL 0)
  message(FATAL_ERROR "configure failed: ${configure_result}")
endif()
execute_process(
  COMMAND "${CMAKE_COMMAND}" --build "${CMAKE_CURRENT_LIST_DIR}/build"
  RESULT_VARIABLE build_result)
if(NOT build_result EQUAL 0)
  message(FATAL_ERROR "build failed: ${build_result}")
endif()
