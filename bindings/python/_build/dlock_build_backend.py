"""The package's build backend: setuptools' own (setuptools.build_meta),
with one check first.

Why a wrapper: setuptools before 70.1 builds a wheel only with the
separate `wheel` package installed, and pip offline (--no-index
--no-build-isolation, the way to install without a package index) cannot
fetch it. A plain Debian venv (`python3 -m venv`) has pip and setuptools
66 but not wheel, and setuptools then fails with "invalid command
'bdist_wheel'", which does not say what is missing. This says what to
install instead. Online, pip's build isolation installs what
get_requires_for_build_wheel names (wheel, for an old setuptools) and the
check never fails.
"""
from __future__ import annotations

from typing import Any

try:
    from setuptools import build_meta as _setuptools
except ImportError as e:  # pragma: no cover (pip names setuptools in requires)
    raise ImportError(
        "dlock: building the package needs setuptools 61 or later: apt-get install python3-setuptools "
        "(Debian's python3) or pip install setuptools; then pip install --no-build-isolation "
        "./bindings/python (%s)" % e) from None


def _check() -> None:
    """Raise, saying what to install, when setuptools has no bdist_wheel
    command (setuptools 70.1 has its own; before, the wheel package's
    entry point provides it)."""
    import setuptools
    from setuptools.dist import Distribution
    try:
        Distribution().get_command_class("bdist_wheel")
    except Exception:
        raise RuntimeError(
            "dlock: this setuptools (%s, before 70.1) builds wheels only with the `wheel` package, "
            "which is not installed: apt-get install python3-wheel (Debian's python3), or, in a venv, "
            "pip install wheel (or pip install 'setuptools>=70.1'); then pip install "
            "--no-build-isolation ./bindings/python again" % setuptools.__version__) from None


# Every hook of setuptools' that this does not wrap, as it is (the
# editable ones exist from setuptools 64 on).
for _hook in _setuptools.__all__:
    globals()[_hook] = getattr(_setuptools, _hook)


def prepare_metadata_for_build_wheel(*args: Any, **kwargs: Any) -> str:
    _check()
    return _setuptools.prepare_metadata_for_build_wheel(*args, **kwargs)


def build_wheel(*args: Any, **kwargs: Any) -> str:
    _check()
    return _setuptools.build_wheel(*args, **kwargs)


if hasattr(_setuptools, "build_editable"):
    def build_editable(*args: Any, **kwargs: Any) -> str:
        _check()
        return _setuptools.build_editable(*args, **kwargs)
