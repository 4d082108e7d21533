//! Option structs that can grow without breaking callers.
//!
//! Each option struct (`apf_dispatcher_options`, `apf_workqueue_options`, `apf_workqueue_add_options`,
//! `apf_queueset_config`) starts with `size_t struct_size`, which its
//! `_default` function sets to `sizeof` the struct as this library knows
//! it. A caller compiled against an older header passes a smaller size:
//! libapf reads that prefix and keeps its defaults for the fields after
//! it. A caller compiled against a newer header passes a larger size:
//! libapf accepts it only if every byte past the fields it knows is zero (a
//! newer field left at its default), since silently ignoring a setting
//! would be worse than refusing it.

use super::status::{apf_status, fail};
use std::mem::size_of;

/// An option struct whose first field is `struct_size: usize`.
pub(crate) trait Growable: Copy {
    /// The struct's C name, for error messages.
    const NAME: &'static str;
    /// The size of the struct's first published version: the smallest
    /// `struct_size` accepted.
    const MIN_SIZE: usize;
    /// The defaults, with `struct_size` set to `size_of::<Self>()`.
    fn defaults() -> Self;
}

/// Read the caller's `*ptr` of `struct_size` bytes over `T::defaults()`.
/// NULL gives the defaults. Errors (`APF_ERR_INVALID_PARAMETER`, naming the
/// struct and its `struct_size` field): a size below `T::MIN_SIZE`, or a
/// larger struct with a non-zero byte past the fields this library knows.
///
/// # Safety
/// `ptr` is NULL or readable for the `struct_size` bytes its first field
/// states (at least one `usize`), and suitably aligned for `T`.
pub(crate) unsafe fn read_growable<T: Growable>(ptr: *const T) -> Result<T, apf_status> {
    if ptr.is_null() {
        return Ok(T::defaults());
    }
    // SAFETY: a non-NULL `ptr` is aligned and readable for at least its
    // leading `usize` (contract above).
    let size = unsafe { ptr.cast::<usize>().read() };
    if size < T::MIN_SIZE {
        return Err(fail(
            apf_status::APF_ERR_INVALID_PARAMETER,
            format_args!(
                "{}.struct_size is {size}, less than the smallest version ({} bytes): \
                 initialise the struct with its _default function",
                T::NAME,
                T::MIN_SIZE
            ),
        ));
    }
    let known = size_of::<T>();
    if size > known {
        // SAFETY: the caller's struct is readable for `size` bytes.
        let tail = unsafe { std::slice::from_raw_parts(ptr.cast::<u8>().add(known), size - known) };
        if let Some(at) = tail.iter().position(|&b| b != 0) {
            return Err(fail(
                apf_status::APF_ERR_INVALID_PARAMETER,
                format_args!(
                    "{}.struct_size is {size}, but this libapf knows only its first {known} \
                     bytes and byte {} is set: a newer header's field that this library \
                     cannot honour",
                    T::NAME,
                    known + at
                ),
            ));
        }
    }
    let mut value = T::defaults();
    // SAFETY: the caller's struct is readable for `min(size, known)` bytes;
    // `value` is a `T` of `known` bytes; every field of these plain structs
    // is valid for any bit pattern the C side can write except `bool`,
    // which C writes as 0 or 1 too. The regions cannot overlap.
    unsafe {
        std::ptr::copy_nonoverlapping(
            ptr.cast::<u8>(),
            (&mut value as *mut T).cast::<u8>(),
            size.min(known),
        );
    }
    Ok(value)
}
