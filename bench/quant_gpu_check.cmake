# quant_gpu_check: CUDA 4-bit kernels vs the CPU ones (bit identity) and their GB/s; only with the
# CUDA kernels (not in the default build: bench/quant_gpu_check.sh builds it).
if(TARGET collective_cuda_kernels)
  add_executable(quant_gpu_check EXCLUDE_FROM_ALL ${CMAKE_CURRENT_LIST_DIR}/quant_gpu_check.cu)
  set_property(TARGET quant_gpu_check PROPERTY COMPILE_OPTIONS "")
  # CMake 3.25 knows no C++20 dialect flag for nvcc 13; the CUDA sources are C++17.
  set_target_properties(quant_gpu_check PROPERTIES CUDA_STANDARD 17 CUDA_STANDARD_REQUIRED ON)
  target_link_libraries(quant_gpu_check PRIVATE collective_cuda_kernels collective_kernels)
endif()
