"""The owner of one native pointer: idempotent close, context manager,
finalizer, a clear error on use after close, and no free while a call that
released the GIL is still inside the library."""

from __future__ import annotations

import threading
from typing import Any

from ._library import ClosedError


class Managed:
    """Base class for objects that own a pointer from libapf.

    Every use of the pointer goes through ``_enter()`` / ``_exit()`` so that
    ``close()`` from another thread while a call is blocked in the library
    (which ctypes runs without the GIL) does not free the object under it:
    the last user frees it. After ``close()`` new uses raise ClosedError.
    """

    _ptr: Any = None
    _users = 0
    _closed = True

    def _set_ptr(self, ptr: Any) -> None:
        if getattr(self, "_guard", None) is not None:
            raise ValueError("already initialized")
        self._guard = threading.Lock()
        self._ptr = ptr
        self._users = 0
        self._closed = False

    def _delete(self, ptr: Any) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def _enter(self) -> Any:
        guard = getattr(self, "_guard", None)
        if guard is None:
            raise ClosedError(f"{type(self).__name__} was never initialized")
        with guard:
            if self._closed:
                raise ClosedError(f"{type(self).__name__} has been closed")
            self._users += 1
            return self._ptr

    def _exit(self) -> None:
        with self._guard:
            self._users -= 1
            ptr = self._take_if_unused()
        if ptr is not None:
            self._delete(ptr)

    def _take_if_unused(self) -> Any:
        if self._closed and self._users == 0 and self._ptr is not None:
            ptr, self._ptr = self._ptr, None
            return ptr
        return None

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Release the native object. Idempotent; later uses raise
        ClosedError. If a call is still running on another thread, the
        object is freed when it returns."""
        guard = getattr(self, "_guard", None)
        if guard is None:
            return
        with guard:
            if self._closed:
                return
            self._closed = True
            ptr = self._take_if_unused()
        self._before_close()
        if ptr is not None:
            self._delete(ptr)

    def _before_close(self) -> None:
        """Hook for subclasses (called once, before the pointer is freed)."""

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        # During interpreter shutdown module globals may be gone already.
        try:
            self.close()
        except Exception:  # noqa: BLE001 - a finalizer must not raise
            pass
