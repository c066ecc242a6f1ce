# Tools and benchmarks: the collrun launcher, collinfo, and nccl-tests-style <collective>_perf on
# libcollective with their <collective>_perf_mpi twins (Open MPI reference; built when MPI is found).
add_executable(collrun ${CMAKE_CURRENT_LIST_DIR}/collrun.cc)

# Shared benchmark code: public API only, so MPI and libcollective backends run the same loop.
add_library(coll_perf STATIC ${CMAKE_CURRENT_LIST_DIR}/perf_data.cc ${CMAKE_CURRENT_LIST_DIR}/perf_colls.cc
  ${CMAKE_CURRENT_LIST_DIR}/perf_harness.cc ${CMAKE_CURRENT_LIST_DIR}/perf_compress.cc)
target_include_directories(coll_perf PUBLIC ${PROJECT_SOURCE_DIR} ${PROJECT_SOURCE_DIR}/include)
# The libcollective backend, shared by the benchmarks and tests/mp.
add_library(coll_perf_coll STATIC ${CMAKE_CURRENT_LIST_DIR}/perf_backend_coll.cc)
target_link_libraries(coll_perf_coll PUBLIC coll_perf collective)

# The *_perf benchmarks' device buffers (perf_device.cc) use the library's CUDA driver (src/gpu),
# which the shared library does not export: they link the library statically, whole.
add_library(coll_perf_device STATIC ${CMAKE_CURRENT_LIST_DIR}/perf_backend_coll.cc
  ${CMAKE_CURRENT_LIST_DIR}/perf_device.cc)
target_link_libraries(coll_perf_device PUBLIC coll_perf collective_internal)

add_executable(collinfo ${CMAKE_CURRENT_LIST_DIR}/collinfo.cc)
target_link_libraries(collinfo PRIVATE collective_internal)

# binary name -> nccl-tests' collective name
set(COLL_PERF_BINARIES
  allreduce:all_reduce all_gather:all_gather reduce_scatter:reduce_scatter broadcast:broadcast reduce:reduce
  alltoall:alltoall sendrecv:sendrecv gather:gather scatter:scatter)

find_package(MPI COMPONENTS C)
if(NOT MPI_C_FOUND)
  message(STATUS "MPI not found: the *_perf_mpi reference benchmarks are not built")
endif()
foreach(pair ${COLL_PERF_BINARIES})
  string(REPLACE ":" ";" parts ${pair})
  list(GET parts 0 bin)
  list(GET parts 1 coll)
  add_executable(${bin}_perf ${CMAKE_CURRENT_LIST_DIR}/perf_main.cc)
  target_link_libraries(${bin}_perf PRIVATE coll_perf_device)
  target_compile_definitions(${bin}_perf PRIVATE COLL_PERF_COLL="${coll}" COLL_PERF_PROGRAM="${bin}_perf")
  if(MPI_C_FOUND)
    add_executable(${bin}_perf_mpi ${CMAKE_CURRENT_LIST_DIR}/perf_main_mpi.cc)
    target_link_libraries(${bin}_perf_mpi PRIVATE coll_perf MPI::MPI_C)
    # The C API from C++: keep the deprecated MPI C++ bindings out.
    target_compile_definitions(${bin}_perf_mpi PRIVATE COLL_PERF_COLL="${coll}" COLL_PERF_PROGRAM="${bin}_perf_mpi"
      OMPI_SKIP_MPICXX MPICH_SKIP_MPICXX)
  endif()
endforeach()
# comm_init_perf: the time to make a communicator (public API only).
add_executable(comm_init_perf ${CMAKE_CURRENT_LIST_DIR}/comm_init_perf.cc)
target_link_libraries(comm_init_perf PRIVATE collective)
# bootstrap_scale: the rendezvous of 256..4096 thread ranks with one root and with sqrt(N) roots.
add_executable(bootstrap_scale ${CMAKE_CURRENT_LIST_DIR}/bootstrap_scale.cc)
target_link_libraries(bootstrap_scale PRIVATE collective_internal)
# first_touch_perf: the cost of first touches of shared memory (the cold-start figures).
add_executable(first_touch_perf ${CMAKE_CURRENT_LIST_DIR}/first_touch_perf.cc)
