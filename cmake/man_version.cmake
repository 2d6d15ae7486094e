# cmake -DVERSION=X.Y.Z -DPAGES=a.1;b.1 -P man_version.cmake
# Fails unless every page's .TH line names "dlock VERSION": the pages in
# docs/ are read as they are (man -l), so a version bump must reach them.
foreach(page IN LISTS PAGES)
  file(STRINGS ${page} th REGEX "^\\.TH " LIMIT_COUNT 1)
  if(NOT th MATCHES "\"dlock ${VERSION}\"")
    message(FATAL_ERROR "${page}: .TH line '${th}' does not name \"dlock ${VERSION}\" (the VERSION file)")
  endif()
endforeach()
message(STATUS "man pages name dlock ${VERSION}")
