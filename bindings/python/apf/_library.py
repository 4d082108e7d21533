"""Finding and loading libapf, and turning its status codes into exceptions."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import threading
from pathlib import Path

from . import _bindings as b

ENV_VAR = "APF_LIBRARY"
_FILE_NAME = "libapf.so"
# The installed library's SONAME (docs/install.md): 0.MINOR before 1.0.
_SONAME = f"libapf.so.{b.APF_VERSION_MAJOR}" if b.APF_VERSION_MAJOR else f"libapf.so.0.{b.APF_VERSION_MINOR}"


class ApfError(Exception):
    """A libapf function failed.

    ``status`` is the ``apf_status`` code, ``status_name`` its name in
    ``apf.h`` and ``message`` the library's message for the failed call: the
    owned ``apf_error`` of the functions that hand one out (constructors,
    reconfiguration), else the code's ``apf_status_text``.
    """

    def __init__(self, status: int, message: str, function: str = ""):
        self.status = status
        self.status_name = b.apf_status_NAMES.get(status, f"unknown status {status}")
        self.message = message
        self.function = function
        where = f"{function}: " if function else ""
        super().__init__(f"{where}{self.status_name} ({status}): {message}")


class ClosedError(RuntimeError):
    """The object was used after ``close()``."""


class LibraryNotFound(OSError):
    """libapf.so could not be located or loaded."""


def _candidates() -> list[str]:
    """Where libapf is looked for, in order: ``APF_LIBRARY`` (a file, or a
    directory holding libapf.so) overrides everything; otherwise the copy
    inside this package (a wheel bundles one), then the system's (the
    dynamic loader's search path, as scripts/install.sh installs it), then
    a development checkout's ``target/release``."""
    configured = os.environ.get(ENV_VAR)
    if configured:
        path = Path(configured)
        return [str(path / _FILE_NAME if path.is_dir() else path)]
    here = Path(__file__).resolve().parent
    system = [_SONAME, _FILE_NAME]
    found = ctypes.util.find_library("apf")
    if found:
        system.insert(0, found)
    # bindings/python/apf/_library.py -> the repository root is three up.
    checkout = here.parent.parent.parent / "target" / "release" / _FILE_NAME
    return [str(here / _FILE_NAME), *system, str(checkout)]


def _load() -> ctypes.CDLL:
    tried = []
    for candidate in _candidates():
        is_path = os.sep in candidate
        if is_path and not Path(candidate).exists():
            tried.append(candidate)
            continue
        try:
            lib = ctypes.CDLL(candidate)
        except OSError as exc:
            if is_path:
                raise LibraryNotFound(f"cannot load {candidate}: {exc}") from exc
            tried.append(candidate)
            continue
        return b.declare(lib)
    raise LibraryNotFound(
        f"libapf not found (tried {', '.join(tried)}); install the apf wheel, "
        f"install libapf (scripts/install.sh), or set {ENV_VAR} to the path of {_FILE_NAME}"
    )


_lib: ctypes.CDLL | None = None
_lib_lock = threading.Lock()


def lib() -> ctypes.CDLL:
    """The loaded library (loaded, declared and version-checked once)."""
    global _lib
    if _lib is None:
        with _lib_lock:
            if _lib is None:
                loaded = _load()
                _check_version(loaded.apf_abi_version())
                _lib = loaded
    return _lib


def header_version() -> int:
    return b.APF_VERSION_NUMBER


def _check_version(found: int) -> None:
    want = header_version()
    major, minor = found >> 16, (found >> 8) & 0xFF
    # Before 1.0 a minor version may break the ABI, as in Cargo's semver.
    compatible = major == b.APF_VERSION_MAJOR and (major > 0 or minor == b.APF_VERSION_MINOR)
    if not compatible or found < want:
        raise LibraryNotFound(
            f"libapf ABI version {_dotted(found)} is incompatible with the "
            f"bindings' header version {_dotted(want)}"
        )


def _dotted(v: int) -> str:
    return f"{v >> 16}.{(v >> 8) & 0xFF}.{v & 0xFF}"


def status_text(status: int) -> str:
    """libapf's fixed description of a status code (``apf_status_text``)."""
    text = ctypes.POINTER(ctypes.c_char)()
    length = ctypes.c_size_t()
    check(lib().apf_status_text(status, ctypes.byref(text), ctypes.byref(length)),
          "apf_status_text")
    return ctypes.string_at(text, length.value).decode()


def takes_error(name: str) -> bool:
    """Whether ``apf_<name>`` ends with an ``apf_error **out_error``."""
    params = b.FUNCTIONS[name][1]
    return bool(params) and params[-1][0] == "out_error"


def error_slot():
    """A fresh ``apf_error *`` for an ``out_error`` argument."""
    return ctypes.POINTER(b.apf_error)()


def take_error(error) -> str:
    """The message of an ``apf_error`` (freeing it); "" for NULL."""
    if not error:
        return ""
    f = lib()
    try:
        text = ctypes.POINTER(ctypes.c_char)()
        length = ctypes.c_size_t()
        if f.apf_error_message(error, ctypes.byref(text), ctypes.byref(length)) != b.APF_OK:
            return ""
        return ctypes.string_at(text, length.value).decode("utf-8", "replace")
    finally:
        f.apf_error_free(error)


def check(status: int, function: str, error=None) -> None:
    """Raise ApfError unless ``status`` is APF_OK; the message is the
    ``apf_error`` the call filled in (freed here), or the code's text."""
    if status != b.APF_OK:
        message = take_error(error) if error is not None else ""
        raise ApfError(status, message or _status_message(status), function)


def _status_message(status: int) -> str:
    text = ctypes.POINTER(ctypes.c_char)()
    length = ctypes.c_size_t()
    if lib().apf_status_text(status, ctypes.byref(text), ctypes.byref(length)) != b.APF_OK:
        return ""
    return ctypes.string_at(text, length.value).decode()


def invoke(f, name: str, *args) -> int:
    """Call ``f`` (the library's ``name``) with ``args``, appending an error
    slot when it takes one; raise ApfError on a non-OK status."""
    if takes_error(name):
        error = error_slot()
        status = f(*args, ctypes.byref(error))
        check(status, name, error)
    else:
        status = f(*args)
        check(status, name)
    return status


def call(name: str, *args) -> None:
    """Call ``apf_<name>`` and raise on a non-OK status."""
    invoke(getattr(lib(), name), name, *args)
