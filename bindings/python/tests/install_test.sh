#!/bin/sh
# `pip install ./bindings/python` offline (no index, no build isolation:
# Debian's setuptools), into a fresh venv that sees the system's packages,
# then the README's example (examples/nightly.py) run by that venv's python
# against a private redis-server, finding libdlock.so through DLOCK_LIBRARY.
# Also checks that the installed package carries py.typed and runs from
# outside the source tree.
#
#   install_test.sh PYTHON PACKAGE_DIR LIBDLOCK_SO
set -eu
py=$1
pkg=$2
lib=$3
# Only what pip installed may be imported (ctest sets PYTHONPATH for the
# other entry).
unset PYTHONPATH
. "$pkg/../../scripts/servers.sh"
private_dir dlock-py-install
# pip builds in the source tree (setuptools writes build/ and *.egg-info
# there); build from a copy so the checkout stays clean and two builds
# cannot meet.
cp -r "$pkg" "$dir/src"
rm -rf "$dir/src/build" "$dir/src/"*.egg-info
"$py" -m venv --without-pip --system-site-packages "$dir/venv"
# The system's pip, run by the venv's interpreter, installs into the venv.
"$dir/venv/bin/python" -m pip install --quiet --no-index --no-build-isolation \
    --disable-pip-version-check "$dir/src" >"$dir/pip.log" 2>&1 || {
    cat "$dir/pip.log" >&2
    echo "install_test: pip install failed" >&2
    exit 1
}
site=$("$dir/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
for f in __init__.py _client.py _native.py _errors.py _args.py _service.py _handles.py _aio.py py.typed; do
    [ -f "$site/dlock/$f" ] || { echo "install_test: $site/dlock/$f not installed" >&2; exit 1; }
done
# Redis must not inherit a sanitizer preload meant for python.
LD_PRELOAD='' start_redis "$dir"
cd "$dir"
out=$(DLOCK_LIBRARY=$lib "$dir/venv/bin/python" "$pkg/examples/nightly.py" "unix://$sock")
echo "$out"
case $out in
    "writing the nightly report with fencing token "[1-9]*) ;;
    *) echo "install_test: unexpected output" >&2; exit 1 ;;
esac
# The import came from the venv, not from the source tree.
where=$(DLOCK_LIBRARY=$lib "$dir/venv/bin/python" -c 'import dlock; print(dlock.__file__)')
case $where in
    "$site"/dlock/*) echo "installed package: $where" ;;
    *) echo "install_test: dlock imported from $where, not the venv" >&2; exit 1 ;;
esac
# Without DLOCK_LIBRARY and the library nowhere on the loader's path, the
# import says what to do.
if LD_LIBRARY_PATH='' "$dir/venv/bin/python" -c 'import dlock' 2>"$dir/err"; then
    echo "install_test: (a system libdlock was found; skipping the missing-library check)"
else
    grep -q DLOCK_LIBRARY "$dir/err" || { cat "$dir/err" >&2; exit 1; }
fi
echo "install_test: ok"
