//! A small per-thread memo of whole classifications.
//!
//! A server sees the same few kinds of request again and again (a
//! controller's gets and updates in its namespaces, kubelets renewing their
//! leases), and the schema a request matches depends only on a handful of
//! its attributes: the user, the groups, the verb, the namespace and, for a
//! resource request, the API group, resource and subresource, or for a
//! non-resource request the path. The object's name never matters, nor a
//! resource request's path. So each thread keeps its last classifications
//! in a direct-mapped table keyed by the classifier (its generation: a
//! unique id per compiled configuration, so a reconfiguration never sees
//! another configuration's answers) and exactly those attributes, stored
//! in full and compared in full: a hit is always what the classifier
//! itself would decide, only cheaper (one pass of hashing and one
//! comparison instead of the subject look-ups, the scan over schemas, and
//! the flow-hash memo). Requests whose attributes do not fit a slot are
//! classified every time. Nothing allocates.

use std::cell::RefCell;

use super::RequestDigest;

/// Slots per thread (a power of two). With [`KEY_MAX`] this is about 8 KiB
/// per thread that classifies.
const SLOTS: usize = 32;
/// Longest encoded key kept.
const KEY_MAX: usize = 224;

/// Where a classification's flow distinguisher comes from: the memo keeps
/// the source, not the string, since the string borrows from the request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum DistinguisherSource {
    /// No flow is computed (no method, or fewer than two queues).
    Empty,
    /// The request's user.
    User,
    /// The request's namespace.
    Namespace,
}

impl DistinguisherSource {
    pub(super) fn of<'r>(self, d: &RequestDigest<'r>) -> &'r str {
        match self {
            DistinguisherSource::Empty => "",
            DistinguisherSource::User => d.user,
            DistinguisherSource::Namespace => d.namespace,
        }
    }
}

/// A classification without its borrowed parts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Decided {
    pub(super) schema_index: usize,
    pub(super) level_index: usize,
    pub(super) flow_hash: u64,
    pub(super) distinguisher: DistinguisherSource,
    pub(super) fallback: bool,
}

#[derive(Clone, Copy)]
struct Slot {
    /// The classifier's generation; 0: empty (generations start at 1).
    owner: u64,
    len: u16,
    decided: Decided,
    key: [u8; KEY_MAX],
}

const EMPTY: Slot = Slot {
    owner: 0,
    len: 0,
    decided: Decided {
        schema_index: 0,
        level_index: 0,
        flow_hash: 0,
        distinguisher: DistinguisherSource::Empty,
        fallback: false,
    },
    key: [0; KEY_MAX],
};

thread_local! {
    static MEMO: RefCell<[Slot; SLOTS]> = const { RefCell::new([EMPTY; SLOTS]) };
}

/// The attributes classification reads, each as a length byte and its
/// bytes (so no two different requests encode alike) after a header of
/// the request's kind and number of groups; and the hash that picks the
/// slot, mixed in as the key is built.
struct Key {
    /// Eight spare zero bytes after the longest key let `push` read a
    /// whole word at any field's start.
    bytes: [u8; KEY_MAX + 8],
    len: usize,
    hash: u64,
}

const K: u64 = 0x517c_c1b7_2722_0a95;

impl Key {
    fn new(owner: u64) -> Key {
        Key {
            bytes: [0; KEY_MAX + 8],
            len: 0,
            hash: owner.wrapping_mul(K),
        }
    }

    /// Encodes `d` into `self` (which the caller keeps in place: a
    /// returned key would be copied); false when it does not fit.
    #[inline(always)]
    fn encode(&mut self, d: &RequestDigest<'_>) -> bool {
        self.encode_fields(d).is_some()
    }

    #[inline(always)]
    fn encode_fields(&mut self, d: &RequestDigest<'_>) -> Option<()> {
        self.bytes[0] = u8::from(d.is_resource_request);
        self.bytes[1] = u8::try_from(d.groups.len()).ok()?;
        self.len = 2;
        self.push(d.user)?;
        self.push(d.verb)?;
        // The namespace is a distinguisher for both kinds of request.
        self.push(d.namespace)?;
        if d.is_resource_request {
            self.push(d.api_group)?;
            self.push(d.resource)?;
            self.push(d.subresource)?;
        } else {
            self.push(d.path)?;
        }
        for g in d.groups {
            self.push(g)?;
        }
        Some(())
    }

    /// Appends a field and mixes its length byte and up to 16 of its bytes
    /// (the first and last eight) into the hash. The hash only spreads keys
    /// over the slots: equality is checked in full, so a collision costs a
    /// miss, never a wrong answer; hashing every byte cost more than it
    /// saved.
    #[inline(always)]
    fn push(&mut self, field: &str) -> Option<()> {
        let field = field.as_bytes();
        let len = u8::try_from(field.len()).ok()?;
        let start = self.len;
        let end = start + 1 + field.len();
        if end > KEY_MAX {
            return None;
        }
        self.bytes[start] = len;
        self.bytes[start + 1..end].copy_from_slice(field);
        self.len = end;
        // The length byte and the first seven bytes (zeros beyond `end`,
        // not yet written), then the last eight when there are more.
        let word =
            |at: usize| u64::from_le_bytes(self.bytes[at..at + 8].try_into().expect("a word"));
        let mut mixed = word(start);
        if field.len() > 7 {
            mixed ^= word(end - 8).rotate_left(29);
        }
        self.hash = (self.hash.rotate_left(5) ^ mixed).wrapping_mul(K);
        Some(())
    }

    fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len]
    }

    fn slot(&self) -> usize {
        let h =
            (self.hash ^ u64::from(self.bytes[0]) ^ u64::from(self.bytes[1]) << 8).wrapping_mul(K);
        (h >> (64 - SLOTS.trailing_zeros())) as usize
    }
}

/// The classification of `d` by the classifier of generation `owner`
/// (never 0): from this thread's memo when it holds the same attributes
/// for the same classifier, otherwise `classify(d)`, remembered.
pub(super) fn memoized(
    owner: u64,
    d: &RequestDigest<'_>,
    classify: impl FnOnce() -> Decided,
) -> Decided {
    let mut key = Key::new(owner);
    if !key.encode(d) {
        return classify();
    }
    let i = key.slot();
    let hit = MEMO.with(|memo| {
        let memo = memo.borrow();
        let slot = &memo[i];
        (slot.owner == owner
            && usize::from(slot.len) == key.len
            && slot.key[..key.len] == *key.as_bytes())
        .then_some(slot.decided)
    });
    if let Some(decided) = hit {
        return decided;
    }
    let decided = classify();
    MEMO.with(|memo| {
        let mut memo = memo.borrow_mut();
        let slot = &mut memo[i];
        slot.owner = owner;
        slot.len = key.len as u16;
        slot.key[..key.len].copy_from_slice(key.as_bytes());
        slot.decided = decided;
    });
    decided
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn decided(schema_index: usize) -> Decided {
        Decided {
            schema_index,
            ..EMPTY.decided
        }
    }

    #[test]
    fn every_attribute_classification_reads_is_part_of_the_key() {
        let groups = ["g1", "g2"];
        let base = RequestDigest {
            user: "u",
            groups: &groups,
            verb: "get",
            is_resource_request: true,
            api_group: "apps",
            resource: "deployments",
            subresource: "scale",
            namespace: "ns",
            name: "n",
            path: "/apis/apps/v1/namespaces/ns/deployments/n/scale",
        };
        let owner = crate::sync::unique_id();
        assert_eq!(memoized(owner, &base, || decided(1)), decided(1));
        assert_eq!(memoized(owner, &base, || decided(99)), decided(1), "a hit");
        // Not read by classification: a different name or resource path
        // is the same key.
        let other_object = RequestDigest {
            name: "m",
            path: "/apis/apps/v1/namespaces/ns/deployments/m/scale",
            ..base
        };
        assert_eq!(memoized(owner, &other_object, || decided(98)), decided(1));
        let fewer = ["g1"];
        let split = ["g1g", "2"];
        let variants = [
            RequestDigest { user: "v", ..base },
            RequestDigest {
                groups: &fewer,
                ..base
            },
            RequestDigest {
                groups: &split,
                ..base
            },
            RequestDigest {
                verb: "list",
                ..base
            },
            RequestDigest {
                is_resource_request: false,
                ..base
            },
            RequestDigest {
                api_group: "",
                ..base
            },
            RequestDigest {
                resource: "pods",
                ..base
            },
            RequestDigest {
                subresource: "",
                ..base
            },
            RequestDigest {
                namespace: "",
                ..base
            },
            // A length byte keeps fields apart: "" + "get" is not "g" + "et".
            RequestDigest {
                user: "ug",
                verb: "et",
                ..base
            },
        ];
        for (n, v) in variants.iter().enumerate() {
            let n = n + 2;
            // `base` in its slot again (a variant may have evicted it), so
            // a key that left out the variant's attribute would hit.
            memoized(owner, &base, || decided(1));
            assert_eq!(memoized(owner, v, || decided(n)), decided(n), "{v:?}");
        }
        // A non-resource request's path is read.
        let url = RequestDigest {
            is_resource_request: false,
            path: "/healthz",
            ..base
        };
        let other_url = RequestDigest {
            path: "/livez",
            ..url
        };
        assert_eq!(memoized(owner, &url, || decided(50)), decided(50));
        assert_eq!(memoized(owner, &other_url, || decided(51)), decided(51));
        // Another classifier never sees this one's answers.
        let other = crate::sync::unique_id();
        assert_eq!(memoized(other, &base, || decided(97)), decided(97));
    }

    #[test]
    fn keys_that_do_not_fit_are_classified_every_time() {
        let long = "x".repeat(256);
        let mut calls = 0;
        let owner = crate::sync::unique_id();
        for _ in 0..2 {
            let d = RequestDigest {
                user: &long,
                ..RequestDigest::default()
            };
            memoized(owner, &d, || {
                calls += 1;
                decided(1)
            });
        }
        let many: Vec<&str> = (0..300).map(|_| "g").collect();
        for _ in 0..2 {
            let d = RequestDigest {
                groups: &many,
                ..RequestDigest::default()
            };
            memoized(owner, &d, || {
                calls += 1;
                decided(1)
            });
        }
        assert_eq!(calls, 4);
    }
}
