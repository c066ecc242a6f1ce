# cuda_memcpy_perf: the reference copy bandwidths of a GPU (device to device, pinned host <-> device)
# through the library's run-time loaded CUDA driver; built always (no CUDA toolkit needed).
add_executable(cuda_memcpy_perf ${CMAKE_CURRENT_LIST_DIR}/cuda_memcpy_perf.cc)
target_link_libraries(cuda_memcpy_perf PRIVATE collective_internal)
