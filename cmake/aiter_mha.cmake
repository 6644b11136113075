# Vendoring helper for CMake projects (3.18+; include it once or many times): after
#   include(3rdparty/aiter_mha/cmake/aiter_mha.cmake)
# link the imported targets aiter_mha::fwd (libmha_fwd.so: mha_fwd, mha_fwd_splitkv, mha_batch_prefill, paged
# attention) and aiter_mha::bwd (libmha_bwd.so: mha_bwd). Each carries the public headers (include/) and the CUDA
# runtime headers on its include path. The libraries link cudart statically; an app that makes CUDA calls of its own
# links CUDA::cudart as usual. CMake's build rpath finds the libraries in the build tree; install them beside the
# app (or set an rpath) for an installed app.
#
# The libraries are built at build time by compile.py into ${CMAKE_BINARY_DIR}/aiter_mha (ninja inside makes a
# rebuild with nothing changed a no-op). Set before the include:
#   AITER_MHA_APIS          the libraries to build: fwd, bwd or both (default "fwd;bwd")
#   AITER_MHA_COMPILE_ARGS  more compile.py options, a list (default: --dtypes bf16 --arch sm_90a --no-python;
#                           e.g. "--dtypes;bf16;--hdims;128;--variants;plain;--arch;sm_90a;--no-python" for the
#                           smallest build, `python3 compile.py --help` for the rest)
#   AITER_MHA_PREBUILT_DIR  a directory that already holds the libraries: nothing is built
# compile.py needs ninja and CUTLASS 4.2.0's headers (CUTLASS_DIR, 3rdparty/cutlass, or the nvidia-cutlass wheel:
# `pip install --no-deps nvidia-cutlass==4.2.0.0` gives just the headers).
include_guard(GLOBAL) # one set of targets per build, however many subprojects include this
if(CMAKE_VERSION VERSION_LESS 3.18)
  message(FATAL_ERROR "aiter_mha: cmake/aiter_mha.cmake needs CMake 3.18 or newer, this is ${CMAKE_VERSION}")
endif()

set(_aiter_mha_root "${CMAKE_CURRENT_LIST_DIR}/..")
get_filename_component(_aiter_mha_root "${_aiter_mha_root}" ABSOLUTE)
if(NOT DEFINED AITER_MHA_APIS)
  set(AITER_MHA_APIS fwd bwd)
endif()
if(NOT DEFINED AITER_MHA_COMPILE_ARGS)
  set(AITER_MHA_COMPILE_ARGS --dtypes bf16 --arch sm_90a --no-python)
endif()
foreach(_api IN LISTS AITER_MHA_APIS)
  if(NOT _api MATCHES "^(fwd|bwd)$")
    message(FATAL_ERROR "aiter_mha: AITER_MHA_APIS takes fwd and / or bwd, got '${_api}'")
  endif()
endforeach()

find_package(CUDAToolkit REQUIRED)

if(AITER_MHA_PREBUILT_DIR)
  get_filename_component(_aiter_mha_out "${AITER_MHA_PREBUILT_DIR}" ABSOLUTE BASE_DIR "${CMAKE_SOURCE_DIR}")
  foreach(_api IN LISTS AITER_MHA_APIS)
    if(NOT EXISTS "${_aiter_mha_out}/libmha_${_api}.so")
      message(FATAL_ERROR "aiter_mha: AITER_MHA_PREBUILT_DIR=${AITER_MHA_PREBUILT_DIR} holds no libmha_${_api}.so")
    endif()
  endforeach()
else()
  find_package(Python3 REQUIRED COMPONENTS Interpreter)
  set(_aiter_mha_out "${CMAKE_BINARY_DIR}/aiter_mha")
  file(MAKE_DIRECTORY "${_aiter_mha_out}")
  set(_aiter_mha_libs)
  foreach(_api IN LISTS AITER_MHA_APIS)
    list(APPEND _aiter_mha_libs "${_aiter_mha_out}/libmha_${_api}.so")
  endforeach()
  list(JOIN AITER_MHA_APIS "," _aiter_mha_api_arg)
  list(JOIN AITER_MHA_COMPILE_ARGS " " _aiter_mha_args_text)
  add_custom_target(aiter_mha_build
    COMMAND "${Python3_EXECUTABLE}" "${_aiter_mha_root}/compile.py" "--api=${_aiter_mha_api_arg}"
            ${AITER_MHA_COMPILE_ARGS}
    WORKING_DIRECTORY "${_aiter_mha_out}"
    BYPRODUCTS ${_aiter_mha_libs}
    COMMENT "aiter_mha: compile.py --api=${_aiter_mha_api_arg} ${_aiter_mha_args_text}"
    USES_TERMINAL VERBATIM)
endif()

foreach(_api IN LISTS AITER_MHA_APIS)
  if(NOT TARGET aiter_mha::${_api})
    add_library(aiter_mha::${_api} SHARED IMPORTED GLOBAL)
    set_target_properties(aiter_mha::${_api} PROPERTIES
      IMPORTED_LOCATION "${_aiter_mha_out}/libmha_${_api}.so"
      IMPORTED_SONAME "libmha_${_api}.so"
      INTERFACE_INCLUDE_DIRECTORIES "${_aiter_mha_root}/include;${CUDAToolkit_INCLUDE_DIRS}")
    if(TARGET aiter_mha_build)
      add_dependencies(aiter_mha::${_api} aiter_mha_build)
    endif()
  endif()
endforeach()
