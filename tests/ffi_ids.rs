//! `apf_start_request_ids` and `apf_dispatcher_name`: decisions that name
//! the flow schema and priority level by id, and the names behind an id.
//! The ids must name what `apf_start_request` names, stay put across
//! reconfigurations, never be reused, and be refused when they are not
//! this dispatcher's; the decision struct's `struct_size` is checked.
#![cfg(not(loom))]

use apf::ffi::*;
use std::mem::size_of;
use std::ptr::{null, null_mut};

#[path = "support/text.rs"]
mod text;
use text::text_of;

const EXECUTE: u32 = apf_outcome::APF_OUTCOME_EXECUTE as u32;

/// Level `tiny` (one seat) for user alice; everyone else goes to the
/// mandatory catch-all. `{LEVEL}` names the level.
const CONFIG: &str = r#"
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: PriorityLevelConfiguration
metadata: {name: {LEVEL}, uid: uid-{LEVEL}}
spec:
  type: Limited
  limited:
    nominalConcurrencyShares: 5
    lendablePercent: 0
    limitResponse: {type: Queue, queuing: {queues: 1, handSize: 1, queueLengthLimit: 2}}
---
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: FlowSchema
metadata: {name: alice-schema, uid: uid-alice}
spec:
  priorityLevelConfiguration: {name: {LEVEL}}
  matchingPrecedence: 100
  rules:
  - subjects: [{kind: User, user: {name: alice}}]
    nonResourceRules: [{verbs: ["*"], nonResourceURLs: ["*"]}]
"#;

fn config(level: &str) -> String {
    CONFIG.replace("{LEVEL}", level)
}

/// Owns a dispatcher for one test.
struct D(*mut apf_dispatcher);

impl Drop for D {
    fn drop(&mut self) {
        // SAFETY: from apf_dispatcher_new_*, and nothing uses it afterwards.
        unsafe { apf_dispatcher_free(self.0) }
    }
}

fn new(level: &str) -> D {
    let text = config(level);
    let mut o = std::mem::MaybeUninit::uninit();
    // SAFETY: writable out.
    assert_eq!(
        unsafe { apf_options_default(o.as_mut_ptr()) },
        apf_status::APF_OK
    );
    // SAFETY: written on APF_OK.
    let mut o = unsafe { o.assume_init() };
    o.manual_clock = true;
    // Two seats: one for the level, one for catch-all.
    o.server_concurrency_limit = 2;
    let mut d = null_mut();
    // SAFETY: text readable for its length; options and out valid.
    let st =
        unsafe { apf_dispatcher_new_from_config(text.as_ptr().cast(), text.len(), &o, &mut d) };
    assert_eq!(st, apf_status::APF_OK, "{}", last_error());
    D(d)
}

fn reconfigure(d: &D, level: &str) {
    let text = config(level);
    // SAFETY: live dispatcher, text readable for its length.
    let st = unsafe { apf_dispatcher_reconfigure(d.0, text.as_ptr().cast(), text.len()) };
    assert_eq!(st, apf_status::APF_OK, "{}", last_error());
}

fn last_error() -> String {
    // SAFETY: `t` is a writable apf_text.
    text_of(|t| unsafe { apf_last_error(t) })
}

const GROUPS: &[apf_str] = &[apf_str {
    ptr: c"system:authenticated".as_ptr(),
    len: 20,
}];

fn digest(user: &'static str) -> apf_request_digest {
    let path = "/healthz";
    apf_request_digest {
        user: user.as_ptr().cast(),
        user_len: user.len(),
        verb: "get".as_ptr().cast(),
        verb_len: 3,
        api_group: null(),
        api_group_len: 0,
        resource: null(),
        resource_len: 0,
        subresource: null(),
        subresource_len: 0,
        namespace_: null(),
        namespace_len: 0,
        name: null(),
        name_len: 0,
        path: path.as_ptr().cast(),
        path_len: path.len(),
        groups: GROUPS.as_ptr(),
        n_groups: GROUPS.len(),
        is_resource_request: false,
    }
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

fn start_ids(d: &D, user: &'static str) -> apf_decision_ids {
    let dg = digest(user);
    let mut out = blank();
    // SAFETY: live dispatcher, readable digest, writable out of its size.
    let st = unsafe { apf_start_request_ids(d.0, &dg, null(), 0, &mut out) };
    assert_eq!(st, apf_status::APF_OK, "{}", last_error());
    out
}

fn start_names(d: &D, user: &'static str) -> apf_decision {
    let dg = digest(user);
    let mut out = std::mem::MaybeUninit::uninit();
    // SAFETY: live dispatcher, readable digest, writable out.
    let st = unsafe { apf_start_request(d.0, &dg, null(), 0, out.as_mut_ptr()) };
    assert_eq!(st, apf_status::APF_OK, "{}", last_error());
    // SAFETY: written on APF_OK.
    unsafe { out.assume_init() }
}

fn finish(d: &D, h: u64) {
    // SAFETY: live dispatcher.
    assert_eq!(
        unsafe { apf_finish(d.0, h, 0) },
        apf_status::APF_OK,
        "{}",
        last_error()
    );
}

fn str_of(s: apf_str) -> String {
    // SAFETY: libapf's strings are readable for len + 1 bytes (NUL).
    let bytes = unsafe { std::slice::from_raw_parts(s.ptr.cast::<u8>(), s.len + 1) };
    assert_eq!(bytes[s.len], 0, "NUL-terminated");
    String::from_utf8(bytes[..s.len].to_vec()).unwrap()
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
        finish(&d, by_name.request);
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
        finish(&d, by_id.request);
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
    finish(&d, alice.request);
}

#[test]
fn ids_survive_reconfiguration_and_are_never_reused() {
    let d = new("tiny");
    let before = start_ids(&d, "alice");
    finish(&d, before.request);
    reconfigure(&d, "tiny");
    let same = start_ids(&d, "alice");
    finish(&d, same.request);
    assert_eq!(
        (same.flow_schema_id, same.priority_level_id),
        (before.flow_schema_id, before.priority_level_id),
        "same name and UID: same id"
    );
    reconfigure(&d, "small");
    let renamed = start_ids(&d, "alice");
    finish(&d, renamed.request);
    assert_eq!(renamed.flow_schema_id, before.flow_schema_id);
    assert_ne!(renamed.priority_level_id, before.priority_level_id);
    assert_eq!(name(&d, renamed.priority_level_id).unwrap().0, "small");
    // The old id still names the old level (a binding's cache stays right).
    assert_eq!(name(&d, before.priority_level_id).unwrap().0, "tiny");
    reconfigure(&d, "tiny");
    let back = start_ids(&d, "alice");
    finish(&d, back.request);
    assert_eq!(
        back.priority_level_id, before.priority_level_id,
        "back to the old pair"
    );
}

#[test]
fn foreign_zero_and_made_up_ids_are_refused() {
    let d = new("tiny");
    let a = start_ids(&d, "alice");
    finish(&d, a.request);
    // Another dispatcher whose salt differs (two salts agree 1 in 4,095).
    let other = (0..8)
        .map(|_| new("tiny"))
        .find(|o| {
            let b = start_ids(o, "alice");
            finish(o, b.request);
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
        assert!(
            last_error().contains(&format!("{id:#x}")),
            "{}",
            last_error()
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
    // SAFETY: live dispatcher, writable text.
    let stats = text_of(|t| unsafe { apf_dispatcher_stats_text(d.0, t) });
    stats
        .lines()
        .filter(|l| l.starts_with("level "))
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let at = f
                .iter()
                .position(|&w| w == "executing")
                .expect("executing field");
            f[at + 1].parse::<u64>().unwrap()
        })
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
        assert!(last_error().contains("digest"), "{}", last_error());
        assert_eq!(
            apf_start_request_ids(d.0, &dg, null(), 0, null_mut()),
            apf_status::APF_ERR_NULL_POINTER
        );
        assert!(last_error().contains("out"), "{}", last_error());
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
        assert!(last_error().contains("struct_size"), "{}", last_error());
        assert_eq!(small.request, 77, "untouched");
    }
    let mut bad = digest("alice");
    bad.verb = b"\xff\xfe".as_ptr().cast();
    bad.verb_len = 2;
    // SAFETY: valid pointers; the verb's bytes are what is tested.
    let st = unsafe { apf_start_request_ids(d.0, &bad, null(), 0, &mut out) };
    assert_eq!(st, apf_status::APF_ERR_INVALID_UTF8);
    assert!(last_error().contains("digest.verb"), "{}", last_error());
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
    finish(&d, newer.known.request);
}
