# The library's layers, bottom to top: the one table that both the build (CMakeLists.txt makes one
# OBJECT target coll_<layer> per library layer, linked only to the layers it uses; libcollective is
# their union) and the include check (tests/layering/check_includes.sh, via the table this file
# writes into the build tree) read.
#
# coll_layer(NAME USES <layers directly below> DIRS <folders>)
#   A file belongs to the layer whose folder is the longest prefix of its path. It may include files
#   of its own layer and of every layer it USES, directly or through them; never one of a layer
#   above, nor of a sibling (two layers neither of which uses the other, such as kernels and topo).
#   Every #include is spelled from the repository root: "src/base/status.h".
#   A folder written DIR:DEP is compiled only where the optional dependency DEP was found.
set(COLL_LAYERS "")
macro(coll_layer name)
  cmake_parse_arguments(_coll_layer "" "" "USES;DIRS" ${ARGN})
  list(APPEND COLL_LAYERS ${name})
  set(COLL_LAYER_${name}_USES ${_coll_layer_USES})
  set(COLL_LAYER_${name}_DIRS ${_coll_layer_DIRS})
endmacro()

coll_layer(public     DIRS include)  # the C API header: includes nothing of ours
coll_layer(base       USES public DIRS src/base)
coll_layer(kernels    USES base DIRS src/kernels src/kernels/cuda)
coll_layer(gpu        USES kernels DIRS src/gpu)  # the CUDA driver (loaded at run time), memory kinds, device kernels
coll_layer(topo       USES base DIRS src/topo)
coll_layer(oob        USES topo DIRS src/oob)
coll_layer(transports USES oob DIRS transports transports/shm transports/tcp transports/ucx:UCX transports/ib:IBVERBS)
coll_layer(schedule   USES transports DIRS src/schedule)
coll_layer(algorithms USES schedule kernels DIRS algorithms)
coll_layer(exec       USES algorithms DIRS src/exec)
coll_layer(plan       USES exec DIRS src/plan)
coll_layer(sim        USES plan DIRS src/sim)  # the fabric simulator: schedules on a modelled network (collsim, COLL_TOPO_FABRIC)
coll_layer(comm       USES sim gpu DIRS src/comm)
coll_layer(api        USES comm DIRS src/api)
# Beside the library: the NCCL net plugin (base, oob and transports only) and the programs on top.
coll_layer(nccl_net   USES transports DIRS src/nccl_net)
coll_layer(tools      USES api nccl_net DIRS bench tests)

# libcollective: these layers' objects, in this order.
set(COLL_LIBRARY_LAYERS base kernels gpu topo oob transports schedule algorithms exec plan sim comm api)

# Every layer a layer may include from (its USES, transitively), into COLL_LAYER_<name>_ALLOWED.
foreach(layer ${COLL_LAYERS})
  set(allowed "")
  set(pending ${COLL_LAYER_${layer}_USES})
  while(pending)
    list(POP_FRONT pending next)
    if(NOT next IN_LIST allowed)
      list(APPEND allowed ${next})
      list(APPEND pending ${COLL_LAYER_${next}_USES})
    endif()
  endwhile()
  set(COLL_LAYER_${layer}_ALLOWED ${allowed})
endforeach()

# The table for the include check: one line per layer, "name<TAB>allowed layers<TAB>folders".
function(coll_write_layer_table path)
  set(text "")
  foreach(layer ${COLL_LAYERS})
    set(dirs "")
    foreach(dir ${COLL_LAYER_${layer}_DIRS})
      string(REGEX REPLACE ":.*" "" dir "${dir}")
      list(APPEND dirs ${dir})
    endforeach()
    string(REPLACE ";" " " allowed "${COLL_LAYER_${layer}_ALLOWED}")
    string(REPLACE ";" " " dirs "${dirs}")
    string(APPEND text "${layer}\t${allowed}\t${dirs}\n")
  endforeach()
  file(WRITE ${path} "${text}")
endfunction()

# The sources of a layer's folders that this build compiles (*.cc; DIR:DEP only where COLL_HAVE_DEP).
function(coll_layer_sources layer out)
  set(sources "")
  foreach(dir ${COLL_LAYER_${layer}_DIRS})
    if(dir MATCHES "^(.*):(.*)$")
      set(dir ${CMAKE_MATCH_1})
      if(NOT COLL_HAVE_${CMAKE_MATCH_2})
        continue()
      endif()
    endif()
    file(GLOB found CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/${dir}/*.cc)
    list(APPEND sources ${found})
  endforeach()
  set(${out} ${sources} PARENT_SCOPE)
endfunction()
