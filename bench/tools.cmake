# Tools and benchmarks: the collrun launcher, collinfo, allreduce_perf (libcollective) and
# allreduce_perf_mpi (Open MPI reference; built only when MPI is found).
add_executable(collrun ${CMAKE_CURRENT_LIST_DIR}/collrun.cc)

# Shared benchmark code: public API only, so MPI and libcollective backends run the same loop.
add_library(coll_perf STATIC ${CMAKE_CURRENT_LIST_DIR}/perf_data.cc ${CMAKE_CURRENT_LIST_DIR}/perf_harness.cc)
target_include_directories(coll_perf PUBLIC ${PROJECT_SOURCE_DIR} ${PROJECT_SOURCE_DIR}/include)

add_executable(allreduce_perf ${CMAKE_CURRENT_LIST_DIR}/allreduce_perf.cc)
target_link_libraries(allreduce_perf PRIVATE coll_perf collective)

add_executable(collinfo ${CMAKE_CURRENT_LIST_DIR}/collinfo.cc)
target_link_libraries(collinfo PRIVATE collective_internal)

find_package(MPI COMPONENTS C)
if(MPI_C_FOUND)
  add_executable(allreduce_perf_mpi ${CMAKE_CURRENT_LIST_DIR}/allreduce_perf_mpi.cc)
  target_link_libraries(allreduce_perf_mpi PRIVATE coll_perf MPI::MPI_C)
  # The C API from C++: keep the deprecated MPI C++ bindings out.
  target_compile_definitions(allreduce_perf_mpi PRIVATE OMPI_SKIP_MPICXX MPICH_SKIP_MPICXX)
else()
  message(STATUS "MPI not found: allreduce_perf_mpi (the reference benchmark) is not built")
endif()
