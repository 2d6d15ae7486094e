"""The package itself: its version, its type marker, how it finds the
library."""
from __future__ import annotations

import os

import dlock

HERE = os.path.dirname(os.path.abspath(__file__))


def test_version_matches_the_tree():
    with open(os.path.join(HERE, "..", "..", "..", "VERSION")) as f:
        assert dlock.__version__ == f.read().strip()
    assert dlock.library_version().count(".") == 2


def test_typed():
    assert os.path.exists(os.path.join(os.path.dirname(dlock.__file__), "py.typed"))


def test_library_from_a_directory():
    lib_dir = os.path.dirname(os.path.realpath(dlock.library_path))
    env = dict(os.environ, DLOCK_LIBRARY=lib_dir)
    import subprocess
    import sys
    p = subprocess.run([sys.executable, "-c", "import dlock; print(dlock.library_path)"],
                       env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip().startswith(lib_dir)


def test_missing_library_says_what_to_do(tmp_path):
    env = dict(os.environ, DLOCK_LIBRARY=str(tmp_path / "libdlock.so"))
    import subprocess
    import sys
    p = subprocess.run([sys.executable, "-c", "import dlock"], env=env, capture_output=True,
                       text=True, timeout=60)
    assert p.returncode != 0
    assert "ImportError" in p.stderr and "DLOCK_LIBRARY" in p.stderr
