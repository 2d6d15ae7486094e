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

# A Python without the `wheel` package: a plain venv of Debian's python3
# gets pip and setuptools 66 from ensurepip, and no wheel. Offline, pip
# cannot fetch it, and the install must fail saying what to install
# (README.md); with wheel there (Debian's python3-wheel, put on the venv's
# path as `pip install wheel` would), the same command must work.
if ! "$py" -m venv "$dir/bare" >"$dir/venv.log" 2>&1; then
    echo "install_test: (no ensurepip for $py: apt-get install python3-venv; skipping the venv without wheel)"
elif "$dir/bare/bin/python" -c 'import wheel' 2>/dev/null; then
    echo "install_test: (the plain venv has wheel; nothing to check without it)"
else
    cp -r "$pkg" "$dir/src2"
    rm -rf "$dir/src2/build" "$dir/src2/"*.egg-info
    if "$dir/bare/bin/python" -m pip install --no-index --no-build-isolation \
            --disable-pip-version-check "$dir/src2" >"$dir/pip2.log" 2>&1; then
        echo "install_test: installed without wheel (this setuptools needs none)"
    else
        grep -q "dlock: this setuptools .* builds wheels only with the .wheel. package" "$dir/pip2.log" \
            && grep -q "apt-get install python3-wheel" "$dir/pip2.log" || {
            cat "$dir/pip2.log" >&2
            echo "install_test: pip without wheel failed without saying what to install" >&2
            exit 1
        }
        echo "install_test: without wheel, pip says: $(grep -o 'dlock: this setuptools.*' "$dir/pip2.log" | head -1)"
        # The package and its metadata (setuptools finds bdist_wheel by
        # the metadata's entry point).
        wheel_pkg=$("$py" -c 'import os, wheel; print(os.path.dirname(wheel.__file__))' 2>/dev/null) || wheel_pkg=
        if [ -z "$wheel_pkg" ]; then
            echo "install_test: ($py has no wheel to lend the venv; skipping the install with it)"
        else
            mkdir "$dir/wheel-only"
            for f in "$wheel_pkg" "$(dirname "$wheel_pkg")"/wheel-*-info; do
                ln -s "$f" "$dir/wheel-only/"
            done
            bare_site=$("$dir/bare/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
            echo "$dir/wheel-only" >"$bare_site/wheel-only.pth"
            rm -rf "$dir/src2/build" "$dir/src2/"*.egg-info
            "$dir/bare/bin/python" -m pip install --quiet --no-index --no-build-isolation \
                --disable-pip-version-check "$dir/src2" >"$dir/pip3.log" 2>&1 || {
                cat "$dir/pip3.log" >&2
                echo "install_test: pip with wheel installed failed" >&2
                exit 1
            }
            DLOCK_LIBRARY=$lib "$dir/bare/bin/python" -c 'import dlock; print("installed with wheel:", dlock.__file__)'
        fi
    fi
fi
echo "install_test: ok"
