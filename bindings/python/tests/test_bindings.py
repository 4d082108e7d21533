"""The ctypes declarations against include/apf.h and the loaded library."""

from __future__ import annotations

import ctypes
from pathlib import Path
import re
import subprocess
import sys

import pytest

from conftest import PACKAGE_ROOT

import apf
from apf import _bindings as b
from apf._library import call, header_version, lib

HEADER = PACKAGE_ROOT.parent.parent / "include" / "apf.h"
GENERATOR = PACKAGE_ROOT / "tools" / "gen_bindings.py"


def header_functions() -> set[str]:
    text = HEADER.read_text()
    # Every exported function in a cbindgen header: `<type> apf_name(`.
    return set(re.findall(r"^[A-Za-z_][\w \*]*?\b(apf_\w+)\s*\(", text, re.M))


def test_generated_bindings_are_current():
    result = subprocess.run([sys.executable, str(GENERATOR), "--check"],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_generator_round_trip_is_deterministic(tmp_path):
    out = tmp_path / "bindings.py"
    for _ in range(2):
        subprocess.run([sys.executable, str(GENERATOR), str(HEADER), str(out)], check=True)
    assert out.read_text() == (PACKAGE_ROOT / "apf" / "_bindings.py").read_text()


def test_every_header_function_is_declared_and_exported():
    names = header_functions()
    assert len(names) >= 18, names
    assert names == set(b.FUNCTIONS), names ^ set(b.FUNCTIONS)
    loaded = lib()
    for name in names:
        fn = getattr(loaded, name)
        restype, params = b.FUNCTIONS[name]
        assert fn.restype is restype, name
        assert list(fn.argtypes) == [t for _, t in params], name


def test_every_status_function_returns_the_status_type():
    for name, (restype, _) in b.FUNCTIONS.items():
        if name == "apf_abi_version" or name.endswith("_free"):
            continue
        assert restype is b.apf_status, name


def test_struct_sizes_are_plausible_for_the_c_layout():
    # A decision: two u32, a u64 handle and four (ptr, len) strings.
    assert ctypes.sizeof(b.apf_decision) == 4 + 4 + 8 + 4 * 16
    assert ctypes.sizeof(b.apf_work_estimate) == 16
    assert ctypes.sizeof(b.apf_str) == 16


def test_abi_version_matches_the_header():
    assert apf.abi_version() == header_version() == b.APF_VERSION_NUMBER
    assert b.APF_VERSION_NUMBER == (b.APF_VERSION_MAJOR << 16 | b.APF_VERSION_MINOR << 8
                                    | b.APF_VERSION_PATCH)


def test_status_text_for_every_code():
    for code in b.apf_status_NAMES:
        assert apf.status_text(code)
    assert apf.status_text(b.APF_ERR_INVALID_HANDLE) == "unknown or stale request handle"
    with pytest.raises(apf.ApfError) as info:
        apf.status_text(6999)
    assert info.value.status == b.APF_ERR_INVALID_PARAMETER


def test_python_enums_cover_the_header_enums():
    assert {o.value for o in apf.Outcome} == set(b.apf_outcome_NAMES)
    reasons = {v for v, n in b.apf_reject_reason_NAMES.items() if not n.endswith("_NONE")}
    assert {r.value for r in apf.RejectReason} == reasons
    assert {r.label for r in apf.RejectReason} == {
        "queue-full", "time-out", "cancelled", "concurrency-limit", "level-failed"}


def test_status_codes_are_in_the_error_range_and_named():
    for code, name in b.apf_status_NAMES.items():
        assert code == 0 if name == "APF_OK" else 7000 <= code < 8000, name


def test_the_exceptions_message_is_the_calls_owned_error():
    with pytest.raises(apf.ApfError) as info:
        apf.Dispatcher.from_config("kind: Nonsense\n")
    assert info.value.status == b.APF_ERR_CONFIG
    assert info.value.status_name == "APF_ERR_CONFIG"
    assert info.value.message
    assert info.value.message != apf.status_text(b.APF_ERR_CONFIG), "it says more"
    # The same call made by hand: the error object, readable from any
    # thread, freed once.
    loaded = lib()
    text = b"kind: Nonsense\n"
    out = ctypes.POINTER(b.apf_dispatcher)()
    error = ctypes.POINTER(b.apf_error)()
    status = loaded.apf_dispatcher_new_from_config(text, len(text), None, ctypes.byref(out),
                                                   ctypes.byref(error))
    assert status == b.APF_ERR_CONFIG and not out and error
    assert loaded.apf_error_status(error) == b.APF_ERR_CONFIG
    seen = []

    def read():
        ptr = ctypes.POINTER(ctypes.c_char)()
        n = ctypes.c_size_t()
        assert loaded.apf_error_message(error, ctypes.byref(ptr), ctypes.byref(n)) == b.APF_OK
        seen.append(ctypes.string_at(ptr, n.value).decode())

    import threading
    t = threading.Thread(target=read)
    t.start()
    t.join()
    assert seen == [info.value.message]
    loaded.apf_error_free(error)
    loaded.apf_error_free(None)  # a no-op
    # A successful call leaves the slot alone; NULL means "not wanted".
    error = ctypes.POINTER(b.apf_error)()
    assert loaded.apf_dispatcher_new_builtin(None, ctypes.byref(out), ctypes.byref(error)) == b.APF_OK
    assert not error
    loaded.apf_dispatcher_free(out)
    assert loaded.apf_dispatcher_new_from_config(text, len(text), None, ctypes.byref(out),
                                                 None) == b.APF_ERR_CONFIG


def test_library_not_found_names_the_env_var(tmp_path, monkeypatch):
    from apf import _library

    monkeypatch.setenv(_library.ENV_VAR, str(tmp_path / "missing.so"))
    with pytest.raises(apf.LibraryNotFound, match="APF_LIBRARY"):
        _library._load()


def test_env_var_may_name_a_directory(monkeypatch):
    from apf import _library

    real = Path(_library._candidates()[0])
    monkeypatch.setenv(_library.ENV_VAR, str(real.parent))
    assert _library._candidates() == [str(real)]


def test_without_the_env_var_the_package_copy_comes_first_then_the_system(monkeypatch):
    from apf import _library

    monkeypatch.delenv(_library.ENV_VAR, raising=False)
    found = _library._candidates()
    package = str(Path(_library.__file__).resolve().parent / "libapf.so")
    assert found[0] == package
    assert _library._SONAME in found[1:3]
    assert found[-1].endswith("target/release/libapf.so")


def test_digest_marshalling_names_real_fields():
    from apf.dispatcher import _DIGEST_FIELDS

    fields = {name for name, _ in b.apf_request_digest._fields_}
    used = {f for pair in _DIGEST_FIELDS.values() for f in pair}
    used |= {"groups", "n_groups", "is_resource_request"}
    assert used == fields
    assert set(_DIGEST_FIELDS) | {"groups", "is_resource_request"} == set(
        apf.RequestDigest.__dataclass_fields__)


def test_null_pointers_are_errors_not_crashes():
    loaded = lib()
    out = ctypes.c_uint64()
    assert loaded.apf_dispatcher_now(None, ctypes.byref(out)) == b.APF_ERR_NULL_POINTER
    assert loaded.apf_dispatcher_options_default(None) == b.APF_ERR_NULL_POINTER
    assert loaded.apf_dispatcher_new_builtin(None, None, None) == b.APF_ERR_NULL_POINTER
    # A NULL dispatcher names no owner (a queueset's request); handle 0 is
    # never issued.
    assert loaded.apf_finish(None, 0, 0) == b.APF_ERR_INVALID_HANDLE
    assert loaded.apf_error_status(None) == b.APF_ERR_NULL_POINTER
    loaded.apf_text_free(None)  # a no-op
    loaded.apf_dispatcher_free(None)  # a no-op


def test_null_options_mean_defaults():
    loaded = lib()
    out = ctypes.POINTER(b.apf_dispatcher)()
    assert loaded.apf_dispatcher_new_builtin(None, ctypes.byref(out), None) == b.APF_OK
    assert out
    loaded.apf_dispatcher_free(out)


def test_stats_text_is_an_owned_buffer_freed_once(dispatcher):
    loaded = lib()
    text = b.apf_text()
    status = loaded.apf_dispatcher_stats_text(dispatcher._enter(), ctypes.byref(text))
    dispatcher._exit()
    assert status == b.APF_OK
    assert ctypes.string_at(text.ptr, text.len + 1).endswith(b"\0")
    assert ctypes.string_at(text.ptr, text.len).decode() == dispatcher.stats_text()
    loaded.apf_text_free(ctypes.byref(text))
    assert not text.ptr and text.len == 0
    loaded.apf_text_free(ctypes.byref(text))  # zeroed: a no-op


def test_options_carry_their_size():
    loaded = lib()
    raw = b.apf_dispatcher_options()
    assert loaded.apf_dispatcher_options_default(ctypes.byref(raw)) == b.APF_OK
    assert raw.struct_size == ctypes.sizeof(b.apf_dispatcher_options)
    raw.struct_size = 0
    out = ctypes.POINTER(b.apf_dispatcher)()
    with pytest.raises(apf.ApfError) as info:
        call("apf_dispatcher_new_builtin", ctypes.byref(raw), ctypes.byref(out))
    assert info.value.status == b.APF_ERR_INVALID_PARAMETER
    assert "apf_dispatcher_options.struct_size" in info.value.message


def test_long_error_message_is_read_whole():
    objects = "\n---\n".join(
        f"apiVersion: flowcontrol.apiserver.k8s.io/v1\nkind: FlowSchema\n"
        f"metadata: {{name: fs-{i}}}\n"
        f"spec: {{priorityLevelConfiguration: {{name: catch-all}}, matchingPrecedence: {20000 + i}}}"
        for i in range(20))
    with pytest.raises(apf.ApfError) as info:
        apf.Dispatcher.from_config(objects)
    message = info.value.message
    assert len(message.encode()) > 256
    for i in range(20):
        assert f"fs-{i}" in message


def test_invalid_utf8_in_a_digest_is_an_error(dispatcher):
    with pytest.raises(apf.ApfError) as info:
        dispatcher.start_request(apf.RequestDigest(user=b"\xff\xfe", verb="get"))
    assert info.value.status == b.APF_ERR_INVALID_UTF8
    with pytest.raises(apf.ApfError) as info:
        dispatcher.start_request(apf.RequestDigest(user="a", verb="get", groups=(b"\xc3",)))
    assert info.value.status == b.APF_ERR_INVALID_UTF8


def test_strings_are_passed_with_their_length_not_nul_terminated(dispatcher):
    # An embedded NUL is part of the name: "alice\0x" is not alice.
    decision = dispatcher.start_request(apf.RequestDigest(user="alice\0x", verb="get",
                                                          resource="pods", namespace="default"))
    assert decision.priority_level == "catch-all"
    dispatcher.finish(decision.request)
