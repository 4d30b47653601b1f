# The -gencode targets sgl-kernel's CMakeLists.txt gives its common flags
# (SGL_KERNEL_CUDA_FLAGS), by toolkit version, processor and switches, as read from
# sgl-kernel/CMakeLists.txt of early 2026 (docs/sglang-commit.md): sm_90 always;
# sm_80 and sm_89 (and sm_87 on aarch64) with ENABLE_BELOW_SM90; sm_100a and sm_120a from
# CUDA 12.8 or with SGL_KERNEL_ENABLE_SM100A, sm_103a from CUDA 13.0 (sm_110a, sm_121a
# on aarch64; sm_101a on aarch64 before 13.0); sm_90a from CUDA 12.4.
#
# sgl_kernel_upstream_gencodes(<out> <cuda-version>) appends them to the list <out>.
function(sgl_kernel_upstream_gencodes out cuda)
  set(flags ${${out}})
  list(APPEND flags "-gencode=arch=compute_90,code=sm_90")
  if(ENABLE_BELOW_SM90)
    list(APPEND flags "-gencode=arch=compute_80,code=sm_80" "-gencode=arch=compute_89,code=sm_89")
    if(CMAKE_SYSTEM_PROCESSOR STREQUAL "aarch64")
      list(APPEND flags "-gencode=arch=compute_87,code=sm_87")
    endif()
  endif()
  if(cuda VERSION_GREATER_EQUAL "12.8" OR SGL_KERNEL_ENABLE_SM100A)
    list(APPEND flags "-gencode=arch=compute_100a,code=sm_100a" "-gencode=arch=compute_120a,code=sm_120a")
    if(cuda VERSION_GREATER_EQUAL "13.0")
      list(APPEND flags "-gencode=arch=compute_103a,code=sm_103a")
      if(CMAKE_SYSTEM_PROCESSOR STREQUAL "aarch64")
        list(APPEND flags "-gencode=arch=compute_110a,code=sm_110a" "-gencode=arch=compute_121a,code=sm_121a")
      endif()
    elseif(CMAKE_SYSTEM_PROCESSOR STREQUAL "aarch64")
      list(APPEND flags "-gencode=arch=compute_101a,code=sm_101a")
    endif()
  endif()
  if(cuda VERSION_GREATER_EQUAL "12.4")
    # Upstream also forces SGL_KERNEL_ENABLE_FA3 on here.
    list(APPEND flags "-gencode=arch=compute_90a,code=sm_90a")
  endif()
  set(${out} "${flags}" PARENT_SCOPE)
endfunction()
