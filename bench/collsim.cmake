# collsim: a collective's actual schedules on a simulated cluster fabric (src/sim).
add_executable(collsim ${CMAKE_CURRENT_LIST_DIR}/collsim.cc)
target_link_libraries(collsim PRIVATE collective_internal coll_perf)
