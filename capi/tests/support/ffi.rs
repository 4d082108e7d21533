//! What the C ABI tests (`tests/ffi*`) share: the small configuration they
//! run on, an owned dispatcher, request digests, and one wrapper for each
//! call of the request protocol, made exactly as C makes it. Included with
//! `#[path]`; each wrapper asserts only what every caller relies on.
#![allow(dead_code)] // not every test binary uses every helper

use apf_capi::*;
use std::ffi::{c_char, CStr};
use std::ptr::{null, null_mut};

#[path = "text.rs"]
mod text;
#[allow(unused_imports)] // take_text: only some binaries read failing texts
pub use text::{err, last_error, take_text, text_of};

pub const SECOND: u64 = 1_000_000_000;
pub const MS: u64 = 1_000_000;

pub const EXECUTE: u32 = apf_outcome::APF_OUTCOME_EXECUTE as u32;
pub const QUEUED: u32 = apf_outcome::APF_OUTCOME_QUEUED as u32;
pub const REJECTED: u32 = apf_outcome::APF_OUTCOME_REJECTED as u32;
pub const NONE: u32 = apf_reject_reason::APF_REJECT_NONE as u32;

// ----- the configuration --------------------------------------------------

/// The configuration the C ABI tests run on: one limited level (`tiny`
/// unless renamed) with one seat (see [`tiny_options`]) and one queue of
/// at most two requests, and the flow schema `alice-schema` sending every
/// request of user `alice` there. Everyone else falls to the mandatory
/// catch-all, which libapf adds with `exempt`.
#[derive(Debug, Clone, Copy)]
pub struct Tiny<'a> {
    level: &'a str,
    by_user: bool,
}

/// [`Tiny`] as it comes: level `tiny` (UID `uid-tiny`), no distinguisher.
pub const fn tiny() -> Tiny<'static> {
    Tiny {
        level: "tiny",
        by_user: false,
    }
}

impl<'a> Tiny<'a> {
    /// The level named `name` (UID `uid-<name>`) instead of `tiny`.
    pub fn level(self, name: &str) -> Tiny<'_> {
        Tiny {
            level: name,
            by_user: self.by_user,
        }
    }

    /// The flow schema tells flows apart by user (`distinguisherMethod:
    /// ByUser`).
    pub fn by_user(self) -> Self {
        Tiny {
            by_user: true,
            ..self
        }
    }

    /// The YAML text.
    pub fn yaml(&self) -> String {
        let level = self.level;
        let distinguisher = if self.by_user {
            "\n  distinguisherMethod: {type: ByUser}"
        } else {
            ""
        };
        format!(
            r#"
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: PriorityLevelConfiguration
metadata: {{name: {level}, uid: uid-{level}}}
spec:
  type: Limited
  limited:
    nominalConcurrencyShares: 5
    lendablePercent: 0
    borrowingLimitPercent: 0
    limitResponse: {{type: Queue, queuing: {{queues: 1, handSize: 1, queueLengthLimit: 2}}}}
---
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: FlowSchema
metadata: {{name: alice-schema, uid: uid-alice}}
spec:
  priorityLevelConfiguration: {{name: {level}}}
  matchingPrecedence: 100{distinguisher}
  rules:
  - subjects: [{{kind: User, user: {{name: alice}}}}]
    nonResourceRules: [{{verbs: ["*"], nonResourceURLs: ["*"]}}]
    resourceRules: [{{verbs: ["*"], apiGroups: ["*"], resources: ["*"], namespaces: ["*"], clusterScope: true}}]
"#
        )
    }

    /// A dispatcher of this configuration on the manual clock, with
    /// [`tiny_options`].
    pub fn dispatcher(&self) -> D {
        new_from_config(&self.yaml(), &tiny_options(true))
    }
}

// ----- dispatchers ---------------------------------------------------------

/// Owns a dispatcher for one test.
pub struct D(pub *mut apf_dispatcher);

impl Drop for D {
    fn drop(&mut self) {
        // A failed test may have left a thread stuck inside the dispatcher
        // (the deadlock some tests look for): freeing would wait for it for
        // ever, so leak the dispatcher instead.
        if std::thread::panicking() {
            return;
        }
        // SAFETY: the pointer came from apf_dispatcher_new_* (or is NULL,
        // a no-op) and nothing uses it after the test's last call.
        unsafe { apf_dispatcher_free(self.0) }
    }
}

// SAFETY: the ABI promises a dispatcher may be used from any thread.
unsafe impl Send for D {}
// SAFETY: as above.
unsafe impl Sync for D {}

/// `apf_dispatcher_options_default`'s options.
pub fn default_options() -> apf_dispatcher_options {
    let mut o = std::mem::MaybeUninit::uninit();
    // SAFETY: `o` is writable.
    assert_eq!(
        unsafe { apf_dispatcher_options_default(o.as_mut_ptr()) },
        apf_status::APF_OK
    );
    // SAFETY: written on APF_OK.
    unsafe { o.assume_init() }
}

/// The options [`Tiny`] is made for: two seats (one for its level, one for
/// catch-all) and a wait limit of one second.
pub fn tiny_options(manual_clock: bool) -> apf_dispatcher_options {
    apf_dispatcher_options {
        manual_clock,
        server_concurrency_limit: 2,
        wait_limit_ns: SECOND,
        ..default_options()
    }
}

/// A dispatcher of `yaml`, which must load.
pub fn new_from_config(yaml: &str, options: &apf_dispatcher_options) -> D {
    let mut d = null_mut();
    // SAFETY: text readable for its length; options and out valid.
    let st = unsafe {
        apf_dispatcher_new_from_config(yaml.as_ptr().cast(), yaml.len(), options, &mut d, err())
    };
    assert_eq!(st, apf_status::APF_OK, "{}", last_error());
    D(d)
}

/// A dispatcher of the built-in configuration.
pub fn builtin(options: &apf_dispatcher_options) -> D {
    let mut d = null_mut();
    // SAFETY: options readable, out writable.
    let st = unsafe { apf_dispatcher_new_builtin(options, &mut d, err()) };
    assert_eq!(st, apf_status::APF_OK, "{}", last_error());
    D(d)
}

pub fn reconfigure(d: &D, yaml: &str) -> apf_status {
    // SAFETY: live dispatcher, text readable for its length.
    unsafe { apf_dispatcher_reconfigure(d.0, yaml.as_ptr().cast(), yaml.len(), err()) }
}

pub fn advance(d: &D, nanos: u64) {
    // SAFETY: live dispatcher.
    assert_eq!(
        unsafe { apf_dispatcher_advance_clock(d.0, nanos) },
        apf_status::APF_OK
    );
}

// ----- requests --------------------------------------------------------------

/// The groups of an authenticated user (static strings, so the pointers
/// stay valid).
pub const AUTHENTICATED: &[apf_str] = &[apf_str {
    ptr: c"system:authenticated".as_ptr(),
    len: 20,
}];

/// A request as a Rust value, turned into the C digest by
/// [`Request::digest`]; an empty string goes to C as `(NULL, 0)`.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    pub user: &'a str,
    pub groups: &'a [apf_str],
    pub verb: &'a str,
    pub api_group: &'a str,
    pub resource: &'a str,
    pub namespace: &'a str,
    pub name: &'a str,
    pub path: &'a str,
    pub is_resource_request: bool,
}

impl<'a> Request<'a> {
    /// `get /healthz` by authenticated `user`: a non-resource request.
    pub const fn healthz(user: &'a str) -> Self {
        Request {
            user,
            groups: AUTHENTICATED,
            verb: "get",
            api_group: "",
            resource: "",
            namespace: "",
            name: "",
            path: "/healthz",
            is_resource_request: false,
        }
    }

    /// `verb` on `resource` of the core group by authenticated `user`,
    /// with no namespace, name or path (struct update fills them in).
    pub const fn resource(user: &'a str, verb: &'a str, resource: &'a str) -> Self {
        Request {
            verb,
            resource,
            path: "",
            is_resource_request: true,
            ..Request::healthz(user)
        }
    }

    /// The digest C passes: it borrows this request's strings.
    pub fn digest(&self) -> apf_request_digest {
        fn raw(s: &str) -> (*const c_char, usize) {
            if s.is_empty() {
                (null(), 0)
            } else {
                (s.as_ptr().cast(), s.len())
            }
        }
        let (user, user_len) = raw(self.user);
        let (verb, verb_len) = raw(self.verb);
        let (api_group, api_group_len) = raw(self.api_group);
        let (resource, resource_len) = raw(self.resource);
        let (namespace_, namespace_len) = raw(self.namespace);
        let (name, name_len) = raw(self.name);
        let (path, path_len) = raw(self.path);
        let (groups, n_groups) = if self.groups.is_empty() {
            (null(), 0)
        } else {
            (self.groups.as_ptr(), self.groups.len())
        };
        apf_request_digest {
            user,
            user_len,
            verb,
            verb_len,
            api_group,
            api_group_len,
            resource,
            resource_len,
            subresource: null(),
            subresource_len: 0,
            namespace_,
            namespace_len,
            name,
            name_len,
            path,
            path_len,
            groups,
            n_groups,
            is_resource_request: self.is_resource_request,
        }
    }
}

/// `apf_start_request` with no deadline.
pub fn try_start(
    d: &D,
    request: &Request<'_>,
    estimate: Option<apf_work_estimate>,
) -> Result<apf_decision, apf_status> {
    let dg = request.digest();
    let mut out = std::mem::MaybeUninit::uninit();
    let est = estimate.as_ref().map_or(null(), |e| e as *const _);
    // SAFETY: all pointers valid for the call.
    let st = unsafe { apf_start_request(d.0, &dg, est, 0, out.as_mut_ptr()) };
    if st == apf_status::APF_OK {
        // SAFETY: written on APF_OK.
        Ok(unsafe { out.assume_init() })
    } else {
        Err(st)
    }
}

/// A start that must succeed (whatever its outcome).
pub fn start(d: &D, request: &Request<'_>) -> apf_decision {
    try_start(d, request, None).unwrap_or_else(|e| panic!("start: {e:?} {}", last_error()))
}

pub fn finish(d: &D, h: u64) -> apf_status {
    // SAFETY: live dispatcher; any handle value is allowed.
    unsafe { apf_finish(d.0, h, 0) }
}

/// A finish that must succeed.
pub fn finish_ok(d: &D, h: u64) {
    assert_eq!(finish(d, h), apf_status::APF_OK, "{}", last_error());
}

/// `apf_request_poll`: the outcome and the reject reason.
pub fn poll(d: &D, h: u64) -> Result<(u32, u32), apf_status> {
    let (mut o, mut r) = (u32::MAX, u32::MAX);
    // SAFETY: live dispatcher, writable outs.
    match unsafe { apf_request_poll(d.0, h, &mut o, &mut r) } {
        apf_status::APF_OK => Ok((o, r)),
        e => Err(e),
    }
}

/// The outcome of a poll that must succeed.
pub fn outcome(d: &D, h: u64) -> u32 {
    poll(d, h)
        .unwrap_or_else(|e| panic!("poll: {e:?} {}", last_error()))
        .0
}

/// `apf_request_wait` for at most `timeout` nanoseconds of real time.
pub fn wait(d: &D, h: u64, timeout: u64) -> Result<(u32, u32), apf_status> {
    let (mut o, mut r) = (u32::MAX, u32::MAX);
    // SAFETY: live dispatcher, writable outs.
    match unsafe { apf_request_wait(d.0, h, timeout, &mut o, &mut r) } {
        apf_status::APF_OK => Ok((o, r)),
        e => Err(e),
    }
}

/// `apf_request_cancel`: whether the request was still waiting.
pub fn cancel(d: &D, h: u64) -> Result<bool, apf_status> {
    let mut c = false;
    // SAFETY: live dispatcher, writable out.
    match unsafe { apf_request_cancel(d.0, h, &mut c) } {
        apf_status::APF_OK => Ok(c),
        e => Err(e),
    }
}

/// `apf_dispatcher_take_completion`: the next decided request, if any.
pub fn take(d: &D) -> Option<u64> {
    let (mut h, mut some) = (7u64, true);
    // SAFETY: live dispatcher, writable outs.
    assert_eq!(
        unsafe { apf_dispatcher_take_completion(d.0, &mut h, &mut some) },
        apf_status::APF_OK
    );
    some.then_some(h)
}

/// A string libapf hands out: NUL-terminated right after its length.
pub fn str_of(s: apf_str) -> String {
    // SAFETY: libapf's strings are NUL-terminated and live with the
    // dispatcher (still alive here).
    let c = unsafe { CStr::from_ptr(s.ptr) };
    assert_eq!(c.to_bytes().len(), s.len, "NUL right after len bytes");
    c.to_str().unwrap().to_owned()
}

// ----- the stats text ----------------------------------------------------------

pub fn stats(d: &D) -> String {
    // One call gives the whole text, however it changes meanwhile.
    // SAFETY: live dispatcher, writable apf_text.
    text_of(|t| unsafe { apf_dispatcher_stats_text(d.0, t) })
}

/// The stats line of `level`.
pub fn level_line(d: &D, level: &str) -> String {
    stats(d)
        .lines()
        .find(|l| l.starts_with(&format!("level {level} ")))
        .unwrap_or_else(|| panic!("no level {level}"))
        .to_owned()
}

/// The number after `key` in a stats line.
pub fn field(line: &str, key: &str) -> u64 {
    let mut words = line.split_whitespace();
    while let Some(w) = words.next() {
        if w == key {
            return words.next().unwrap().parse().unwrap();
        }
    }
    panic!("no {key} in {line}")
}
