//! Test-only exports of the dispatcher ABI (feature `test-hooks`): the
//! binding test suites call them; the installed library does not export
//! them.

use super::dispatcher::apf_dispatcher;
use super::error::apf_error;
use super::status::apf_status;

/// Testing aid, not part of the API: panics inside libapf (while holding a
/// request-slab lock if `dispatcher` is not NULL) to show that the panic
/// boundary contains it. Returns `APF_ERR_PANIC`, and the panic message in
/// `*out_error` (when not NULL).
///
/// # Safety
/// `dispatcher` must be NULL or live; `out_error` NULL or writable.
#[doc(hidden)]
#[no_mangle]
pub unsafe extern "C" fn apf_test_panic(
    dispatcher: *const apf_dispatcher,
    out_error: *mut *mut apf_error,
) -> apf_status {
    ffi_error_boundary! { out_error,
        // SAFETY: NULL or live, per the contract.
        match unsafe { super::cast::try_from(dispatcher) } {
            Some(_) => crate::slab::requests().panic_while_locked(
                "apf_test_panic: deliberate panic while holding a request-slab lock",
            ),
            None => panic!("apf_test_panic: deliberate panic"),
        }
        #[allow(unreachable_code)]
        apf_status::APF_OK
    }
}
