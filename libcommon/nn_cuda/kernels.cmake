# The native transformer's GPU ops as one NVRTC module (included by libcommon/CMakeLists.txt; see
# ops.hpp for the layout). From libcommon/nn_cuda/ops/, found by globbing, no list kept by hand:
#   <family>.cu, *.cuh  embedded in the binaries at build time as the default rules file is: real files
#                       for editors and NVRTC's messages, no file to find at run time;
#   <family>.cpp        built into ca_nn_cuda (libcommon/<area>/ and its subfolders are ca_<area>); each
#                       defines ops::<family>_kernels(), the name expressions it launches, which the
#                       generated kernel_names() calls (a family without one fails to link).
# Editing a .cu, or adding or removing a file here, re-runs CMake at the next build (CONFIGURE_DEPENDS).
file(GLOB NN_CUDA_KERNEL_FILES CONFIGURE_DEPENDS RELATIVE ${CMAKE_SOURCE_DIR}
     ${CMAKE_CURRENT_LIST_DIR}/ops/*.cu ${CMAKE_CURRENT_LIST_DIR}/ops/*.cuh)
set(NN_CUDA_SOURCE_ENTRIES "")
foreach(f ${NN_CUDA_KERNEL_FILES})
  file(READ ${CMAKE_SOURCE_DIR}/${f} text)
  if(text MATCHES "\\)nncuda\"")
    message(FATAL_ERROR "${f} contains the raw-string delimiter )nncuda\"")
  endif()
  string(APPEND NN_CUDA_SOURCE_ENTRIES "      {\"${f}\", R\"nncuda(${text})nncuda\"},\n")
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/${f})
endforeach()
file(GLOB NN_CUDA_FAMILY_FILES CONFIGURE_DEPENDS ${CMAKE_CURRENT_LIST_DIR}/ops/*.cpp)
set(NN_CUDA_FAMILY_DECLARATIONS "")
set(NN_CUDA_FAMILIES "")
foreach(f ${NN_CUDA_FAMILY_FILES})
  get_filename_component(family ${f} NAME_WE)
  string(APPEND NN_CUDA_FAMILY_DECLARATIONS "std::vector<std::string> ${family}_kernels();  // ops/${family}.cpp\n")
  string(APPEND NN_CUDA_FAMILIES "&ops::${family}_kernels, ")
endforeach()
set(NN_CUDA_GENERATED ${CMAKE_CURRENT_BINARY_DIR}/generated/nn_cuda_kernels.cpp)
configure_file(${CMAKE_CURRENT_LIST_DIR}/kernels.cpp.in ${NN_CUDA_GENERATED} @ONLY)
