# Compile sgl-kernel only for the GPU architectures in TORCH_CUDA_ARCH_LIST.
#
# sgl-kernel's CMakeLists.txt clears torch's arch flags after find_package(Torch) and
# lists its own -gencode targets (sm_90, sm_90a, sm_100a, sm_120a, sm_103a with CUDA 13,
# sm_80/sm_89 below SM90), so TORCH_CUDA_ARCH_LIST narrows nothing, and it forces FA3
# (a Hopper-only library) on whatever SGL_KERNEL_ENABLE_FA3 says. When the environment
# sets TORCH_CUDA_ARCH_LIST ("12.0a", "9.0a", "8.9;9.0a"; entries separated by ";" or
# spaces, "+PTX" ignored), sgl_kernel_host_gencodes() keeps only the -gencode entries
# whose code=sm_XX target is in the list, fails when none is left, and builds FA3 only
# when the list has sm_90a and the SGL_KERNEL_ENABLE_FA3 cache switch is on. Without
# TORCH_CUDA_ARCH_LIST it changes nothing. Added by sglprov's SM120 patch series.

# sgl_kernel_arch_targets(<out>): the sm_XX targets of TORCH_CUDA_ARCH_LIST, "" if unset.
function(sgl_kernel_arch_targets out)
  set(targets "")
  string(REPLACE " " ";" entries "$ENV{TORCH_CUDA_ARCH_LIST}")
  foreach(entry IN LISTS entries)
    string(STRIP "${entry}" entry)
    string(REPLACE "+PTX" "" entry "${entry}")
    string(REPLACE "." "" entry "${entry}")
    if(NOT entry STREQUAL "")
      list(APPEND targets "sm_${entry}")
    endif()
  endforeach()
  set(${out} "${targets}" PARENT_SCOPE)
endfunction()

# sgl_kernel_filter_gencodes(<flags-var> <targets> <kept-var> <before-var> <after-var>):
# the flags with the -gencode entries for other targets dropped, and how many -gencode
# entries there were before and after.
function(sgl_kernel_filter_gencodes _sgl_flags_var _sgl_targets kept_out before_out after_out)
  set(kept "")
  set(before 0)
  set(after 0)
  foreach(flag IN LISTS ${_sgl_flags_var})
    if(flag MATCHES "^-gencode[= ]arch=compute_[0-9]+[af]?,code=(sm_[0-9]+[af]?)$")
      math(EXPR before "${before} + 1")
      if(CMAKE_MATCH_1 IN_LIST _sgl_targets)
        list(APPEND kept "${flag}")
        math(EXPR after "${after} + 1")
      endif()
    else()
      list(APPEND kept "${flag}")
    endif()
  endforeach()
  set(${kept_out} "${kept}" PARENT_SCOPE)
  set(${before_out} ${before} PARENT_SCOPE)
  set(${after_out} ${after} PARENT_SCOPE)
endfunction()

# sgl_kernel_host_gencodes(<flags-var>): narrows the flags in <flags-var> (the common
# SGL_KERNEL_CUDA_FLAGS) to the host's targets and sets SGL_KERNEL_ENABLE_FA3, in the
# caller's scope.
function(sgl_kernel_host_gencodes _sgl_flags)
  sgl_kernel_arch_targets(targets)
  if(targets STREQUAL "")
    message(STATUS "sgl-kernel: TORCH_CUDA_ARCH_LIST is not set; building every architecture")
    return()
  endif()
  sgl_kernel_filter_gencodes(${_sgl_flags} "${targets}" kept before after)
  if(after EQUAL 0)
    message(FATAL_ERROR "sgl-kernel: TORCH_CUDA_ARCH_LIST=\"$ENV{TORCH_CUDA_ARCH_LIST}\" "
      "(${targets}) leaves none of the ${before} -gencode targets of ${_sgl_flags}; "
      "check the arch list, ENABLE_BELOW_SM90 and the CUDA version (${CUDA_VERSION})")
  endif()
  set(${_sgl_flags} "${kept}" PARENT_SCOPE)
  set(fa3 OFF)
  if("sm_90a" IN_LIST targets AND "$CACHE{SGL_KERNEL_ENABLE_FA3}")
    set(fa3 ON)
  endif()
  set(SGL_KERNEL_ENABLE_FA3 ${fa3} PARENT_SCOPE)
  # Recorded in the cache too, where a configured build can be checked.
  set(SGL_KERNEL_HOST_GENCODES "${_sgl_flags}: ${before} -> ${after} (${targets})" CACHE INTERNAL
    "-gencode targets before and after the host-arch filter")
  message(STATUS "sgl-kernel: TORCH_CUDA_ARCH_LIST=\"$ENV{TORCH_CUDA_ARCH_LIST}\": "
    "${_sgl_flags} -gencode targets ${before} -> ${after}; FA3 ${fa3}")
endfunction()

# sgl_kernel_host_gencodes_target(<target> <flags-var>): narrows a target whose only
# CUDA options are ${<flags-var>} (FlashMLA's); a target none of whose targets is
# wanted keeps its flags (its sources are written for those architectures only).
function(sgl_kernel_host_gencodes_target target _sgl_flags)
  sgl_kernel_arch_targets(targets)
  if(targets STREQUAL "" OR NOT TARGET ${target})
    return()
  endif()
  sgl_kernel_filter_gencodes(${_sgl_flags} "${targets}" kept before after)
  if(after EQUAL 0)
    message(STATUS "sgl-kernel: ${target} has no target in TORCH_CUDA_ARCH_LIST; "
      "left with its ${before} -gencode targets")
    return()
  endif()
  set_property(TARGET ${target} PROPERTY COMPILE_OPTIONS "$<$<COMPILE_LANGUAGE:CUDA>:${kept}>")
  message(STATUS "sgl-kernel: ${target} -gencode targets ${before} -> ${after}")
endfunction()
