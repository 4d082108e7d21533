//! Test-only exports of the workqueue ABI (feature `test-hooks`): the
//! binding test suites call them; the installed library does not export
//! them.

use super::*;

/// Testing aid, not part of the API: panics inside libapf (while holding
/// one of the queue's item-handle locks if `queue` is not NULL) to show
/// that the panic boundary contains it and the queue stays usable. Returns
/// `APF_ERR_PANIC`.
///
/// # Safety
/// `queue` must be NULL or live.
#[doc(hidden)]
#[no_mangle]
pub unsafe extern "C" fn apf_workqueue_test_panic(queue: *mut apf_workqueue) -> apf_status {
    ffi_panic_boundary! {
        // SAFETY: NULL or live, per the contract.
        match unsafe { crate::cast::try_from(queue) } {
            Some(q) => q.core.items.panic_while_locked(
                "apf_workqueue_test_panic: deliberate panic while holding an item-handle lock",
            ),
            None => panic!("apf_workqueue_test_panic: deliberate panic"),
        }
        #[allow(unreachable_code)]
        apf_status::APF_OK
    }
}

/// Testing aid, not part of the API: how many workers are parked in
/// `apf_workqueue_get` (so a test knows they are blocked before it wakes them).
///
/// # Safety
/// `queue` must be NULL or live; `out` NULL or writable.
#[doc(hidden)]
#[no_mangle]
pub unsafe extern "C" fn apf_workqueue_test_parked(
    queue: *mut apf_workqueue,
    out: *mut usize,
) -> apf_status {
    ffi_panic_boundary! {
        let core = try_queue!(queue);
        let out = try_out!(out);
        out.write(each!(&core.kind, q => q.parked()));
        apf_status::APF_OK
    }
}
