//! libapf.so and libapf.a: every `#[no_mangle]` function of apf-capi, the
//! C ABI described by include/apf.h. Nothing else is defined here.

pub use apf_capi::*;
