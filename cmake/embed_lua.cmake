# Turn each Lua script into a C string constant, at build time, so the
# library carries its scripts with no files to install.
# Invoked as: cmake -DOUT=file.c -DSCRIPTS="a.lua;b.lua" -P embed_lua.cmake
set(body "/* Generated from the scripts in src/lua by cmake/embed_lua.cmake. Do not edit. */\n")
string(APPEND body "#include \"script.h\"\n\n")
foreach(path IN LISTS SCRIPTS)
  get_filename_component(name "${path}" NAME_WE)
  file(READ "${path}" text)
  string(REPLACE "\\" "\\\\" text "${text}")
  string(REPLACE "\"" "\\\"" text "${text}")
  string(REPLACE "\n" "\\n\"\n    \"" text "${text}")
  string(APPEND body "const char dlock_lua_${name}[] =\n    \"${text}\";\n\n")
endforeach()
file(WRITE "${OUT}.tmp" "${body}")
configure_file("${OUT}.tmp" "${OUT}" COPYONLY)
