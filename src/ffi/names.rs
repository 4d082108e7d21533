//! Flow schema and priority level names and UIDs, interned as
//! NUL-terminated strings the dispatcher owns until `apf_dispatcher_free`.
//!
//! A decision carries `Arc<Schema>` and `Arc<Level>`; their addresses key a
//! read-mostly map (lock-free reads) to the interned strings, so the hot
//! path does one hash lookup per object and no string hashing. The map
//! holds a reference to every object it has a key for, so no address is
//! freed and reused while it is a key. A reconfiguration through the ABI
//! rebuilds the map from the objects in force, so it does not grow with
//! the number of reconfigurations; the interned strings themselves are
//! deduplicated by content and only freed with the dispatcher.

use crate::dispatcher::Dispatcher;
use crate::level::{Level, Schema};
use crate::sync::{lock, Arc, ArcCell, Mutex};
use std::any::Any;
use std::collections::HashMap;
use std::ffi::c_char;

/// A borrowed string: `ptr` to `len` bytes of UTF-8. Strings libapf gives
/// out are also NUL-terminated (`ptr[len] == 0`) and never NULL (an absent
/// UID is the empty string), except `apf_request_info`'s, which point into
/// the caller's path.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct apf_str {
    /// The bytes (NULL only with `len` 0).
    pub ptr: *const c_char,
    /// Their number, without any NUL.
    pub len: usize,
}

impl apf_str {
    fn empty() -> apf_str {
        apf_str {
            ptr: c"".as_ptr(),
            len: 0,
        }
    }
}

/// An object's two interned strings.
#[derive(Debug, Clone, Copy)]
pub(crate) struct NamePair {
    pub(crate) name: apf_str,
    pub(crate) uid: apf_str,
}

// SAFETY: the pointers point into `Arena` allocations that are immutable
// once made and live until the dispatcher is freed; sharing them between
// threads is sharing `&'static`-like read-only bytes.
unsafe impl Send for NamePair {}
// SAFETY: as above.
unsafe impl Sync for NamePair {}

#[derive(Default)]
struct Arena {
    /// Content -> NUL-terminated copy. Boxed bytes never move.
    strings: HashMap<Box<str>, Box<[u8]>>,
}

impl Arena {
    fn intern(&mut self, s: &str) -> apf_str {
        if s.is_empty() {
            return apf_str::empty();
        }
        let bytes = self.strings.entry(s.into()).or_insert_with(|| {
            let mut v = Vec::with_capacity(s.len() + 1);
            v.extend_from_slice(s.as_bytes());
            v.push(0);
            v.into_boxed_slice()
        });
        apf_str {
            ptr: bytes.as_ptr().cast(),
            len: s.len(),
        }
    }
}

#[derive(Default)]
struct Writer {
    arena: Arena,
    /// Keep-alives for the current map's keys.
    owners: Vec<Arc<dyn Any + Send + Sync>>,
}

/// The name table of one dispatcher.
pub(crate) struct Names {
    map: ArcCell<HashMap<usize, NamePair, ahash::RandomState>>,
    writer: Mutex<Writer>,
}

fn key<T>(obj: &Arc<T>) -> usize {
    Arc::as_ptr(obj) as *const () as usize
}

impl Names {
    pub(crate) fn new(dispatcher: &Dispatcher) -> Names {
        let names = Names {
            map: ArcCell::new(Arc::new(HashMap::default())),
            writer: Mutex::new(Writer::default()),
        };
        names.rebuild(dispatcher);
        names
    }

    /// Names of a decision's schema and level, in one read of the map.
    pub(crate) fn of(&self, schema: &Arc<Schema>, level: &Arc<Level>) -> (NamePair, NamePair) {
        let (s, l) = self
            .map
            .with(|m| (m.get(&key(schema)).copied(), m.get(&key(level)).copied()));
        let s = s.unwrap_or_else(|| self.insert(schema, |s| (&s.name, s.uid.as_deref())));
        let l = l.unwrap_or_else(|| self.insert(level, |l| (&l.name, l.uid.as_deref())));
        (s, l)
    }

    fn insert<T: Send + Sync + 'static>(
        &self,
        obj: &Arc<T>,
        strings: impl Fn(&T) -> (&str, Option<&str>),
    ) -> NamePair {
        // A request that raced with a reconfiguration got an object of the
        // old configuration: add it.
        let mut w = lock(&self.writer);
        if let Some(pair) = self.map.with(|m| m.get(&key(obj)).copied()) {
            return pair; // another thread added it meanwhile
        }
        let (name, uid) = strings(obj);
        let pair = NamePair {
            name: w.arena.intern(name),
            uid: w.arena.intern(uid.unwrap_or("")),
        };
        let mut map = HashMap::clone(&self.map.load_full());
        map.insert(key(obj), pair);
        w.owners.push(obj.clone());
        self.map.store(Arc::new(map));
        pair
    }

    /// Reset the map to the objects in force.
    pub(crate) fn rebuild(&self, dispatcher: &Dispatcher) {
        let mut w = lock(&self.writer);
        let mut map = HashMap::default();
        let mut owners: Vec<Arc<dyn Any + Send + Sync>> = Vec::new();
        for s in dispatcher.flow_schemas() {
            let pair = NamePair {
                name: w.arena.intern(&s.name),
                uid: w.arena.intern(s.uid.as_deref().unwrap_or("")),
            };
            map.insert(key(&s), pair);
            owners.push(s);
        }
        for l in dispatcher.levels() {
            let pair = NamePair {
                name: w.arena.intern(&l.name),
                uid: w.arena.intern(l.uid.as_deref().unwrap_or("")),
            };
            map.insert(key(&l), pair);
            owners.push(l);
        }
        // Store the new map before dropping the old keep-alives: a reader
        // that still sees an old key finds its object alive.
        self.map.store(Arc::new(map));
        w.owners = owners;
    }
}
