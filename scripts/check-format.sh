#!/bin/sh
# The C sources are formatted by the committed .clang-format: fails, naming
# the first lines that differ, when one is not. Run from anywhere; the
# tree is this script's parent (a git checkout or an unpacked tarball).
set -eu
cd "$(dirname "$0")/.."
command -v clang-format >/dev/null 2>&1 || { echo "check-format: clang-format not installed" >&2; exit 77; }
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    files=$(git ls-files '*.c' '*.h')
else
    files=$(find include src tools seckill tests bench examples fuzz -name '*.[ch]' 2>/dev/null)
fi
# shellcheck disable=SC2086
clang-format --dry-run --Werror $files
