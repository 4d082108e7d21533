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
//!
//! Each distinct (name, UID) pair also gets a small integer id for
//! `apf_start_request_ids`, so a binding can cache the names by id (an
//! array index) instead of copying or hashing strings per request. Ids are
//! never reused within a dispatcher (the pairs, like the strings, live until
//! it is freed), so a cached id stays valid across reconfigurations, and a
//! pair that survives a reconfiguration keeps its id. An id is the pair's
//! index plus one in its low [`ID_INDEX_BITS`] bits and the dispatcher's
//! non-zero salt in the bits above, so 0 is never an id and another
//! dispatcher's id is refused here, except when the two salts collide (1 in
//! 4,095).

use crate::sync::{lock, Arc, ArcCell, Mutex};
use apf::dispatcher::Dispatcher;
use apf::level::{Level, Schema};
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

/// The bits of a name id that hold the pair's index plus one; the salt
/// takes the 12 bits above.
pub(crate) const ID_INDEX_BITS: u32 = 20;
const ID_INDEX_MASK: u32 = (1 << ID_INDEX_BITS) - 1;

/// An object's two interned strings and their pair's id.
#[derive(Debug, Clone, Copy)]
pub(crate) struct NamePair {
    pub(crate) name: apf_str,
    pub(crate) uid: apf_str,
    /// 0 only once a dispatcher has given out `2^20 - 1` distinct pairs.
    pub(crate) id: u32,
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

struct Writer {
    arena: Arena,
    /// Keep-alives for the current map's keys.
    owners: Vec<Arc<dyn Any + Send + Sync>>,
    /// Every pair given an id, at its index; never shrinks.
    pairs: Vec<(apf_str, apf_str)>,
    /// A pair's index in `pairs`, by its interned strings' addresses (the
    /// arena deduplicates by content, so equal addresses are equal pairs).
    by_strings: HashMap<(usize, usize), u32>,
    salt: u32,
}

impl Writer {
    fn new() -> Writer {
        Writer {
            arena: Arena::default(),
            owners: Vec::new(),
            pairs: Vec::new(),
            by_strings: HashMap::new(),
            salt: fresh_salt(),
        }
    }

    /// Intern an object's strings and give the pair its id.
    fn pair(&mut self, name: &str, uid: Option<&str>) -> NamePair {
        let name = self.arena.intern(name);
        let uid = self.arena.intern(uid.unwrap_or(""));
        let key = (name.ptr as usize, uid.ptr as usize);
        let index = match self.by_strings.get(&key) {
            Some(&i) => Some(i),
            // Index + 1 must fit the id's index bits; past that, id 0.
            None if self.pairs.len() < ID_INDEX_MASK as usize => {
                let i = self.pairs.len() as u32;
                self.pairs.push((name, uid));
                self.by_strings.insert(key, i);
                Some(i)
            }
            None => None,
        };
        NamePair {
            name,
            uid,
            id: index.map_or(0, |i| self.salt << ID_INDEX_BITS | (i + 1)),
        }
    }
}

/// A salt for one dispatcher's ids: 12 bits, never 0.
fn fresh_salt() -> u32 {
    // Not random, just different between the dispatchers of a process.
    let mixed = crate::sync::unique_id().wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 52;
    (mixed as u32 % 0xfff) + 1
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
            writer: Mutex::new(Writer::new()),
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
        let pair = w.pair(name, uid);
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
            let pair = w.pair(&s.name, s.uid.as_deref());
            map.insert(key(&s), pair);
            owners.push(s);
        }
        for l in dispatcher.levels() {
            let pair = w.pair(&l.name, l.uid.as_deref());
            map.insert(key(&l), pair);
            owners.push(l);
        }
        // Store the new map before dropping the old keep-alives: a reader
        // that still sees an old key finds its object alive.
        self.map.store(Arc::new(map));
        w.owners = owners;
    }

    /// The name and UID of an id this dispatcher gave out, if it did.
    pub(crate) fn by_id(&self, id: u32) -> Option<(apf_str, apf_str)> {
        let w = lock(&self.writer);
        if id >> ID_INDEX_BITS != w.salt {
            return None;
        }
        let index = (id & ID_INDEX_MASK).checked_sub(1)?;
        w.pairs.get(index as usize).copied()
    }
}
