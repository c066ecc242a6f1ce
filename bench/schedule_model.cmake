# schedule_model: the modelled All-Reduce time table (README) from the actual schedules.
add_executable(schedule_model ${CMAKE_CURRENT_LIST_DIR}/schedule_model.cc)
target_link_libraries(schedule_model PRIVATE collective_internal)
