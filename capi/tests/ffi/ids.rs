//! `apf_start_request_ids` and `apf_dispatcher_name`: decisions that name
//! the flow schema and priority level by id, and the names behind an id.
//! The ids must name what `apf_start_request` names, stay put across
//! reconfigurations, never be reused, and be refused when they are not
//! this dispatcher's; the decision struct's `struct_size` is checked.
use crate::support::{self, *};
use apf_capi::*;
use std::mem::size_of;
use std::ptr::{null, null_mut};

/// The [`Tiny`] configuration with its level named `level`.
fn new(level: &str) -> D {
    tiny().level(level).dispatcher()
}

fn reconfigure(d: &D, level: &str) {
    let st = support::reconfigure(d, &tiny().level(level).yaml());
    assert_eq!(st, apf_status::APF_OK, "{}", last_error());
}

/// `get /healthz` by `user`: alice's go to the level, anyone else's to
/// catch-all.
fn digest(user: &str) -> apf_request_digest {
    Request::healthz(user).digest()
}

fn blank() -> apf_decision_ids {
    apf_decision_ids {
        struct_size: size_of::<apf_decision_ids>(),
        outcome: 77,
        reject_reason: 77,
        request: 77,
        flow_schema_id: 77,
        priority_level_id: 77,
    }
}

fn start_ids(d: &D, user: &str) -> apf_decision_ids {
    let dg = digest(user);
    let mut out = blank();
    // SAFETY: live dispatcher, readable digest, writable out of its size.
    let st = unsafe { apf_start_request_ids(d.0, &dg, null(), 0, &mut out) };
    assert_eq!(st, apf_status::APF_OK, "{}", last_error());
    out
}

fn start_names(d: &D, user: &str) -> apf_decision {
    start(d, &Request::healthz(user))
}

fn name(d: &D, id: u32) -> Result<(String, String), apf_status> {
    let none = apf_str {
        ptr: null(),
        len: 0,
    };
    let (mut n, mut u) = (none, none);
    // SAFETY: live dispatcher, writable outs.
    match unsafe { apf_dispatcher_name(d.0, id, &mut n, &mut u) } {
        apf_status::APF_OK => Ok((str_of(n), str_of(u))),
        st => {
            assert!(n.ptr.is_null() && u.ptr.is_null(), "outs written on error");
            Err(st)
        }
    }
}

#[test]
fn ids_name_what_apf_start_request_names() {
    let d = new("tiny");
    for user in ["alice", "bob"] {
        let by_name = start_names(&d, user);
        finish_ok(&d, by_name.request);
        let by_id = start_ids(&d, user);
        assert_eq!(by_id.struct_size, size_of::<apf_decision_ids>());
        assert_eq!((by_id.outcome, by_id.reject_reason), (EXECUTE, 0));
        assert_ne!(by_id.request, 0);
        let schema = name(&d, by_id.flow_schema_id).unwrap();
        let level = name(&d, by_id.priority_level_id).unwrap();
        assert_eq!(
            schema,
            (
                str_of(by_name.flow_schema_name),
                str_of(by_name.flow_schema_uid)
            ),
            "{user}"
        );
        assert_eq!(
            level,
            (
                str_of(by_name.priority_level_name),
                str_of(by_name.priority_level_uid)
            ),
            "{user}"
        );
        // The id's strings are the very ones apf_decision hands out.
        let mut n = apf_str {
            ptr: null(),
            len: 0,
        };
        let mut u = n;
        // SAFETY: live dispatcher, writable outs.
        unsafe { apf_dispatcher_name(d.0, by_id.flow_schema_id, &mut n, &mut u) };
        assert_eq!(n.ptr, by_name.flow_schema_name.ptr);
        finish_ok(&d, by_id.request);
    }
    let alice = start_ids(&d, "alice");
    assert_eq!(
        name(&d, alice.flow_schema_id).unwrap(),
        ("alice-schema".into(), "uid-alice".into())
    );
    assert_eq!(
        name(&d, alice.priority_level_id).unwrap(),
        ("tiny".into(), "uid-tiny".into())
    );
    assert_ne!(alice.flow_schema_id, alice.priority_level_id);
    // Queued and rejected decisions carry the ids too (tiny: one seat,
    // one queue of two).
    let queued = start_ids(&d, "alice");
    assert_eq!(queued.outcome, apf_outcome::APF_OUTCOME_QUEUED as u32);
    assert_eq!(queued.priority_level_id, alice.priority_level_id);
    start_ids(&d, "alice");
    let rejected = start_ids(&d, "alice");
    assert_eq!(rejected.outcome, apf_outcome::APF_OUTCOME_REJECTED as u32);
    assert_eq!(rejected.request, 0);
    assert_eq!(
        (rejected.flow_schema_id, rejected.priority_level_id),
        (alice.flow_schema_id, alice.priority_level_id)
    );
    finish_ok(&d, alice.request);
}

#[test]
fn ids_survive_reconfiguration_and_are_never_reused() {
    let d = new("tiny");
    let before = start_ids(&d, "alice");
    finish_ok(&d, before.request);
    reconfigure(&d, "tiny");
    let same = start_ids(&d, "alice");
    finish_ok(&d, same.request);
    assert_eq!(
        (same.flow_schema_id, same.priority_level_id),
        (before.flow_schema_id, before.priority_level_id),
        "same name and UID: same id"
    );
    reconfigure(&d, "small");
    let renamed = start_ids(&d, "alice");
    finish_ok(&d, renamed.request);
    assert_eq!(renamed.flow_schema_id, before.flow_schema_id);
    assert_ne!(renamed.priority_level_id, before.priority_level_id);
    assert_eq!(name(&d, renamed.priority_level_id).unwrap().0, "small");
    // The old id still names the old level (a binding's cache stays right).
    assert_eq!(name(&d, before.priority_level_id).unwrap().0, "tiny");
    reconfigure(&d, "tiny");
    let back = start_ids(&d, "alice");
    finish_ok(&d, back.request);
    assert_eq!(
        back.priority_level_id, before.priority_level_id,
        "back to the old pair"
    );
}

#[test]
fn foreign_zero_and_made_up_ids_are_refused() {
    let d = new("tiny");
    let a = start_ids(&d, "alice");
    finish_ok(&d, a.request);
    // Another dispatcher whose salt differs (two salts agree 1 in 4,095).
    let other = (0..8)
        .map(|_| new("tiny"))
        .find(|o| {
            let b = start_ids(o, "alice");
            finish_ok(o, b.request);
            b.flow_schema_id >> 20 != a.flow_schema_id >> 20
        })
        .expect("eight dispatchers with d's salt");
    let mut bad = vec![
        0,
        u32::MAX,
        a.flow_schema_id & 0xfff0_0000, // index 0: never an id
        (a.flow_schema_id & 0xfff0_0000) | 0xfffff, // past the table
        a.flow_schema_id & 0x000f_ffff, // no salt
    ];
    bad.push(a.flow_schema_id ^ 0x0010_0000); // another salt
    for id in bad {
        assert_eq!(
            name(&d, id),
            Err(apf_status::APF_ERR_INVALID_PARAMETER),
            "{id:#x}"
        );
    }
    assert_eq!(
        name(&other, a.flow_schema_id),
        Err(apf_status::APF_ERR_INVALID_PARAMETER),
        "another dispatcher's id"
    );
    let mut s = apf_str {
        ptr: null(),
        len: 0,
    };
    let mut u = s;
    let id = a.flow_schema_id;
    // SAFETY: NULLs are what is tested; the other pointers are valid.
    unsafe {
        assert_eq!(
            apf_dispatcher_name(null_mut(), id, &mut s, &mut u),
            apf_status::APF_ERR_NULL_POINTER
        );
        assert_eq!(
            apf_dispatcher_name(d.0, id, null_mut(), &mut u),
            apf_status::APF_ERR_NULL_POINTER
        );
        assert_eq!(
            apf_dispatcher_name(d.0, id, &mut s, null_mut()),
            apf_status::APF_ERR_NULL_POINTER
        );
    }
    assert!(s.ptr.is_null() && u.ptr.is_null());
}

/// Requests executing on a dispatcher, from its stats.
fn executing(d: &D) -> u64 {
    stats(d)
        .lines()
        .filter(|l| l.starts_with("level "))
        .map(|l| field(l, "executing"))
        .sum()
}

#[test]
fn nulls_bad_strings_and_wrong_struct_size_start_nothing() {
    let d = new("tiny");
    let dg = digest("alice");
    let mut out = blank();
    // SAFETY: NULLs are what is tested; the other pointers are valid.
    unsafe {
        assert_eq!(
            apf_start_request_ids(null_mut(), &dg, null(), 0, &mut out),
            apf_status::APF_ERR_NULL_POINTER
        );
        assert_eq!(
            apf_start_request_ids(d.0, null(), null(), 0, &mut out),
            apf_status::APF_ERR_NULL_POINTER
        );
        assert_eq!(
            apf_start_request_ids(d.0, &dg, null(), 0, null_mut()),
            apf_status::APF_ERR_NULL_POINTER
        );
    }
    assert_eq!(out, blank(), "out untouched on errors");
    for size in [0, 8, size_of::<apf_decision_ids>() - 1] {
        let mut small = blank();
        small.struct_size = size;
        // SAFETY: valid pointers; the size is what is tested.
        let st = unsafe { apf_start_request_ids(d.0, &dg, null(), 0, &mut small) };
        assert_eq!(
            st,
            apf_status::APF_ERR_INVALID_PARAMETER,
            "struct_size {size}"
        );
        assert_eq!(small.request, 77, "untouched");
    }
    let mut bad = digest("alice");
    bad.verb = b"\xff\xfe".as_ptr().cast();
    bad.verb_len = 2;
    // SAFETY: valid pointers; the verb's bytes are what is tested.
    let st = unsafe { apf_start_request_ids(d.0, &bad, null(), 0, &mut out) };
    assert_eq!(st, apf_status::APF_ERR_INVALID_UTF8);
    assert_eq!(executing(&d), 0, "no error started a request");
}

#[test]
fn a_newer_callers_larger_struct_gets_its_tail_zeroed() {
    #[repr(C)]
    struct Newer {
        known: apf_decision_ids,
        later: [u64; 3],
    }
    let d = new("tiny");
    let dg = digest("alice");
    let mut newer = Newer {
        known: blank(),
        later: [u64::MAX; 3],
    };
    newer.known.struct_size = size_of::<Newer>();
    // SAFETY: writable for struct_size bytes.
    let st = unsafe { apf_start_request_ids(d.0, &dg, null(), 0, &mut newer.known) };
    assert_eq!(st, apf_status::APF_OK, "{}", last_error());
    assert_eq!(newer.known.struct_size, size_of::<Newer>());
    assert_eq!(newer.later, [0; 3], "fields this library does not know");
    assert_eq!(name(&d, newer.known.priority_level_id).unwrap().0, "tiny");
    finish_ok(&d, newer.known.request);
}
