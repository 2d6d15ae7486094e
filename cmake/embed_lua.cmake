# Turn each Lua script into a C string constant, at build time, so the
# library carries its scripts with no files to install.
# Invoked as:
#   cmake -DOUT=file.c -DSCRIPTS="a.lua;b.lua" [-DLIB=dir] [-DEXPANDED=dir] -P embed_lua.cmake
#
# A line "--@include NAME" in a script is replaced by the text of
# LIB/NAME.lua: Lua shared by several scripts (local functions) is written
# once, and Redis still gets one self-contained script per call. A missing
# fragment, a malformed or indented include, or an include inside a
# fragment stops the build rather than leaving a script that fails only
# when Redis runs it.
# With EXPANDED, each expanded script is also written there as NAME.lua,
# for tools that load the scripts themselves (bench/run.sh).
set(body "/* Generated from the scripts in src/lua by cmake/embed_lua.cmake. Do not edit. */\n")
string(APPEND body "#include \"script.h\"\n\n")
if(EXPANDED)
  file(MAKE_DIRECTORY "${EXPANDED}")
endif()
foreach(path IN LISTS SCRIPTS)
  get_filename_component(name "${path}" NAME_WE)
  file(READ "${path}" text)
  # Only whole lines are includes; "\n" around the text lets the first and
  # last lines match like the others.
  set(text "\n${text}\n")
  string(REGEX MATCHALL "--@include" anywhere "${text}")
  string(REGEX MATCHALL "\n--@include[^\n]*" includes "${text}")
  list(LENGTH anywhere n_anywhere)
  list(LENGTH includes n_includes)
  if(NOT n_anywhere EQUAL n_includes)
    # Indented, say: a mere comment to Lua, and the functions it should
    # have brought missing when Redis runs the script.
    message(FATAL_ERROR "${path}: '--@include' must start a line of its own")
  endif()
  foreach(line IN LISTS includes)
    string(REGEX REPLACE "^\n" "" line "${line}")
    if(NOT line MATCHES "^--@include ([A-Za-z0-9_]+)$")
      message(FATAL_ERROR "${path}: malformed include line '${line}' (want '--@include NAME')")
    endif()
    if(NOT LIB)
      message(FATAL_ERROR "${path}: '${line}': no fragment folder given (-DLIB=dir)")
    endif()
    set(fragment "${LIB}/${CMAKE_MATCH_1}.lua")
    if(NOT EXISTS "${fragment}")
      message(FATAL_ERROR "${path}: '${line}': no fragment ${fragment}")
    endif()
    file(READ "${fragment}" fragment_text)
    if("\n${fragment_text}" MATCHES "\n--@include")
      message(FATAL_ERROR "${fragment}: a fragment cannot include others")
    endif()
    string(REGEX REPLACE "\n$" "" fragment_text "${fragment_text}")
    string(REPLACE "\n${line}\n" "\n${fragment_text}\n" text "${text}")
  endforeach()
  string(REGEX REPLACE "^\n" "" text "${text}")
  string(REGEX REPLACE "\n$" "" text "${text}")
  if(EXPANDED)
    # Written every time: they are outputs of the build rule, so their
    # timestamps must say they are up to date. Nothing compiles them.
    file(WRITE "${EXPANDED}/${name}.lua" "${text}")
  endif()
  string(REPLACE "\\" "\\\\" text "${text}")
  string(REPLACE "\"" "\\\"" text "${text}")
  string(REPLACE "\n" "\\n\"\n    \"" text "${text}")
  string(APPEND body "const char dlock_lua_${name}[] =\n    \"${text}\";\n\n")
endforeach()
file(WRITE "${OUT}.tmp" "${body}")
configure_file("${OUT}.tmp" "${OUT}" COPYONLY)
# configure_file leaves an unchanged file's time alone; the build tool, which
# ran this because an input (this file, a fragment) is newer, would then
# run it again on every build.
file(TOUCH_NOCREATE "${OUT}")
