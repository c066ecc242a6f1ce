# quant_perf: single-core GB/s of the 4-bit quantization kernels per SIMD level, beside memcpy.
add_executable(quant_perf ${CMAKE_CURRENT_LIST_DIR}/quant_perf.cc)
target_link_libraries(quant_perf PRIVATE collective_internal)
