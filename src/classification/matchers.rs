//! The compiled form of flow schemas.
//!
//! Subjects are the first filter every schema applies, and the same few
//! names (`system:authenticated`, `system:serviceaccounts`, ...) recur in
//! many schemas. So every exact user name, service-account namespace prefix
//! and group name of the configuration gets a bit; a request's user and
//! groups are looked up once ([`SubjectKey`]), and each schema's subject
//! test is then a few `AND`s. Names beyond the 64 bits of a table keep the
//! string comparison ("spill") so any configuration still works.
//!
//! The other lists use [`StrSet`]: a flag for `*`, a scan for short lists,
//! a hash set for long ones.

use ahash::AHashSet;
use sha2::Sha256;

use super::words::{self, middle_eq, Ends};
use super::{finish_flow_hash, flow_hash_prefix, LevelInfo, RequestDigest};
use crate::config::{
    DistinguisherMethod, NonResourcePolicyRule, PolicyRulesWithSubjects, ResourcePolicyRule,
    Subject, ValidFlowSchema, WILDCARD,
};

const SERVICE_ACCOUNT_PREFIX: &str = "system:serviceaccount:";

/// Lists at most this long are scanned; longer ones are hashed.
const SCAN_LIMIT: usize = 8;

/// Up to 64 distinct names, each with its own bit, found by an
/// open-addressed table keyed by the names' [`Ends`] (no `memcmp`, no
/// hash of every byte: see `words`).
#[derive(Clone, Debug)]
struct NameTable {
    names: Vec<Box<str>>,
    /// Bit `min(len, 63)` set for the length of every name: a name whose
    /// length has no bit is not in the table, without a look-up (most
    /// users are in no table).
    lengths: u64,
    /// Linear probing over a fixed number of slots, at least twice the
    /// most names (so a probe always ends at an empty slot, and an index
    /// masked by `SLOTS - 1` needs no bounds check).
    slots: Box<[NameSlot; NAME_SLOTS]>,
}

const NAME_SLOTS: usize = 128;
const NAME_SLOT_BITS: u32 = NAME_SLOTS.trailing_zeros();
const _: () = assert!(NAME_SLOTS.is_power_of_two() && NAME_SLOTS >= 2 * 64);

/// A name's ends, its word at offset 8 (which with the ends covers a name
/// of up to 24 bytes; longer ones compare the rest with the name), and its
/// index + 1 (0: an empty slot).
#[derive(Clone, Copy, Debug, Default)]
struct NameSlot {
    head: u64,
    tail: u64,
    second: u64,
    /// The length and `index + 1`, as `len << 8 | (index + 1)`.
    len_index: u64,
}

/// Seeds the slot hash (any constant: entries are compared in full).
const NAME_SEED: u64 = 0x6a09_e667_f3bc_c908;

impl Default for NameTable {
    fn default() -> Self {
        NameTable {
            names: Vec::new(),
            lengths: 0,
            slots: Box::new([NameSlot::default(); NAME_SLOTS]),
        }
    }
}

fn length_bit(len: usize) -> u64 {
    1 << len.min(63)
}

impl NameTable {
    /// The name's bit, adding it if there is room; `None` when full.
    fn intern(&mut self, name: &str) -> Option<u64> {
        if let Some(i) = self.position(name.as_bytes()) {
            return Some(1 << i);
        }
        if self.names.len() == 64 {
            return None;
        }
        let index = self.names.len();
        self.names.push(name.into());
        self.lengths |= length_bit(name.len());
        let b = name.as_bytes();
        let ends = Ends::of(b);
        let mut at = ends.spread(NAME_SEED, NAME_SLOT_BITS);
        while self.slots[at].len_index != 0 {
            at = (at + 1) % NAME_SLOTS;
        }
        self.slots[at] = NameSlot {
            head: ends.head,
            tail: ends.tail,
            second: second_word(b),
            len_index: (b.len() as u64) << 8 | (index as u64 + 1),
        };
        Some(1 << index)
    }

    // Always inlined: four look-ups per request (the user and, typically,
    // three groups) each paid a call's register saves and restores.
    #[inline(always)]
    fn position(&self, name: &[u8]) -> Option<usize> {
        if self.lengths & length_bit(name.len()) == 0 {
            return None;
        }
        let ends = Ends::of(name);
        let second = second_word(name);
        let mut at = ends.spread(NAME_SEED, NAME_SLOT_BITS);
        loop {
            let slot = &self.slots[at % NAME_SLOTS];
            if slot.len_index == 0 {
                return None;
            }
            if slot.head == ends.head
                && slot.tail == ends.tail
                && slot.second == second
                && slot.len_index >> 8 == name.len() as u64
            {
                let i = (slot.len_index & 0xff) as usize - 1;
                if name.len() <= 24 || middle_eq(self.names[i].as_bytes(), name) {
                    return Some(i);
                }
            }
            at = (at + 1) % NAME_SLOTS;
        }
    }

    #[inline(always)]
    fn bit(&self, name: &str) -> u64 {
        self.bit_of(name.as_bytes())
    }

    #[inline(always)]
    fn bit_of(&self, name: &[u8]) -> u64 {
        self.position(name).map_or(0, |i| 1 << i)
    }
}

/// The subject names of a whole configuration.
#[derive(Clone, Debug, Default)]
pub(super) struct SubjectTables {
    users: NameTable,
    /// `system:serviceaccount:<namespace>:`, found by the lengths they
    /// come in (see [`SubjectTables::key`]).
    prefixes: NameTable,
    groups: NameTable,
}

/// A request's user and groups as bits of the [`SubjectTables`].
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct SubjectKey {
    users: u64,
    prefixes: u64,
    groups: u64,
}

/// The word at byte offset 8 of a name longer than 16 bytes (0 for a
/// shorter one, which its [`Ends`] determine).
#[inline(always)]
fn second_word(b: &[u8]) -> u64 {
    if b.len() > 16 {
        words::word_at(b, 8)
    } else {
        0
    }
}

/// Whether `user` starts with [`SERVICE_ACCOUNT_PREFIX`] (22 bytes: three
/// overlapping words, no `memcmp`).
#[inline(always)]
fn is_service_account(user: &[u8]) -> bool {
    const P: &[u8] = SERVICE_ACCOUNT_PREFIX.as_bytes();
    const _: () = assert!(P.len() >= 16 && P.len() <= 24);
    user.len() >= P.len() && words::eq(&user[..P.len()], P)
}

impl SubjectTables {
    #[inline]
    pub(super) fn key(&self, user: &str, groups: &[&str]) -> SubjectKey {
        let mut prefixes = 0;
        // Every prefix is a service account namespace's
        // (`system:serviceaccount:<ns>:`, see `SubjectMatcher::new`). The
        // user starts with one exactly when its first `len` bytes, for
        // some prefix length `len`, end in `:` and are that prefix: so
        // each length the table has is looked up once.
        let u = user.as_bytes();
        if self.prefixes.lengths != 0 && is_service_account(u) {
            for_each_bit(self.prefixes.lengths, |len| {
                if len < 63 {
                    if len > 0 && len <= u.len() && u[len - 1] == b':' {
                        prefixes |= self.prefixes.bit_of(&u[..len]);
                    }
                } else {
                    // Prefixes of 63 bytes or more share the last length
                    // bit: scanned.
                    for (i, p) in self.prefixes.names.iter().enumerate() {
                        if p.len() >= 63 && u.starts_with(p.as_bytes()) {
                            prefixes |= 1 << i;
                        }
                    }
                }
            });
        }
        SubjectKey {
            users: self.users.bit(user),
            prefixes,
            groups: groups.iter().fold(0, |bits, g| bits | self.groups.bit(g)),
        }
    }
}

/// What a schema could possibly match, in a few words, so that the scan
/// over schemas skips most of them without touching their rules.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Prefilter {
    /// Union of the rules' subjects; `everyone` and spilled names make it
    /// pass always.
    any_subject: bool,
    users: u64,
    prefixes: u64,
    groups: u64,
    resource_rules: bool,
    non_resource_rules: bool,
}

impl Prefilter {
    #[inline]
    pub(super) fn passes(&self, key: &SubjectKey, is_resource_request: bool) -> bool {
        (if is_resource_request {
            self.resource_rules
        } else {
            self.non_resource_rules
        }) && (self.any_subject
            || key.users & self.users != 0
            || key.prefixes & self.prefixes != 0
            || key.groups & self.groups != 0)
    }
}

/// The schemas whose [`Prefilter`] a request passes, found from its
/// [`SubjectKey`]'s few set bits instead of testing every schema's
/// prefilter: bit `i` of a mask stands for the `i`-th compiled schema (in
/// matching order), so walking a mask's set bits upward keeps the order.
/// Built only when there are at most 64 compiled schemas.
#[derive(Clone, Debug)]
pub(super) struct Candidates {
    /// Schemas that pass for anyone (`*` subjects, spilled names).
    anyone: u64,
    /// Schemas with resource rules, and with non-resource rules.
    resource: u64,
    non_resource: u64,
    /// By bit of the subject tables: the schemas that name it.
    users: Box<[u64; 64]>,
    prefixes: Box<[u64; 64]>,
    groups: Box<[u64; 64]>,
}

impl Candidates {
    pub(super) fn new(compiled: &[CompiledSchema]) -> Option<Candidates> {
        if compiled.len() > 64 {
            return None;
        }
        let mut c = Candidates {
            anyone: 0,
            resource: 0,
            non_resource: 0,
            users: Box::new([0; 64]),
            prefixes: Box::new([0; 64]),
            groups: Box::new([0; 64]),
        };
        for (i, s) in compiled.iter().enumerate() {
            let me = 1u64 << i;
            let p = &s.prefilter;
            if p.any_subject {
                c.anyone |= me;
            }
            if p.resource_rules {
                c.resource |= me;
            }
            if p.non_resource_rules {
                c.non_resource |= me;
            }
            for (by_bit, bits) in [
                (&mut c.users, p.users),
                (&mut c.prefixes, p.prefixes),
                (&mut c.groups, p.groups),
            ] {
                for_each_bit(bits, |b| by_bit[b] |= me);
            }
        }
        Some(c)
    }

    /// The compiled schemas whose prefilter passes: exactly those for
    /// which [`Prefilter::passes`] is true.
    #[inline]
    pub(super) fn of(&self, key: &SubjectKey, is_resource_request: bool) -> u64 {
        let mut mask = self.anyone;
        for_each_bit(key.users, |b| mask |= self.users[b]);
        for_each_bit(key.prefixes, |b| mask |= self.prefixes[b]);
        for_each_bit(key.groups, |b| mask |= self.groups[b]);
        mask & if is_resource_request {
            self.resource
        } else {
            self.non_resource
        }
    }
}

/// Calls `f` with the index of every set bit of `bits`, lowest first.
#[inline(always)]
pub(super) fn for_each_bit(mut bits: u64, mut f: impl FnMut(usize)) {
    while bits != 0 {
        f(bits.trailing_zeros() as usize);
        bits &= bits - 1;
    }
}

#[derive(Clone, Debug)]
pub(super) struct CompiledSchema {
    pub(super) index: usize,
    pub(super) level: usize,
    pub(super) prefilter: Prefilter,
    rules: Box<[CompiledRule]>,
    distinguisher: Option<DistinguisherMethod>,
    /// SHA-256 state with the schema name and separator already absorbed;
    /// `None` when the level has fewer than two queues and no flow is
    /// computed.
    flow_hasher: Option<Sha256>,
    /// Unique id of `flow_hasher`, the key of the per-thread hash memo.
    hasher_id: u64,
}

impl CompiledSchema {
    pub(super) fn new(
        index: usize,
        fs: &ValidFlowSchema,
        level: &LevelInfo,
        level_index: usize,
        tables: &mut SubjectTables,
    ) -> Self {
        let rules: Box<[CompiledRule]> = fs
            .rules
            .iter()
            .map(|r| CompiledRule::new(r, tables))
            .collect();
        let mut prefilter = Prefilter::default();
        for r in rules.iter() {
            let s = &r.subjects;
            prefilter.any_subject |= s.everyone || s.spill.is_some();
            prefilter.users |= s.users;
            prefilter.prefixes |= s.prefixes;
            prefilter.groups |= s.groups;
            prefilter.resource_rules |= !r.resource_rules.is_empty();
            prefilter.non_resource_rules |= !r.non_resource_rules.is_empty();
        }
        CompiledSchema {
            index,
            level: level_index,
            prefilter,
            rules,
            distinguisher: fs.distinguisher,
            flow_hasher: (level.queues > 1).then(|| flow_hash_prefix(&fs.name)),
            hasher_id: crate::sync::unique_id(),
        }
    }

    #[inline]
    pub(super) fn matches(&self, key: &SubjectKey, d: &RequestDigest<'_>) -> bool {
        self.rules.iter().any(|r| r.matches(key, d))
    }

    /// The flow distinguisher, empty when no flow is computed.
    pub(super) fn distinguisher<'r>(&self, d: &RequestDigest<'r>) -> &'r str {
        if self.flow_hasher.is_none() {
            return "";
        }
        match self.distinguisher {
            None => "",
            Some(DistinguisherMethod::ByUser) => d.user,
            Some(DistinguisherMethod::ByNamespace) => d.namespace,
        }
    }

    #[inline]
    pub(super) fn flow_hash(&self, distinguisher: &str) -> u64 {
        match &self.flow_hasher {
            Some(hasher) => super::flow_hash_memo::memoized(self.hasher_id, distinguisher, || {
                finish_flow_hash(hasher.clone(), distinguisher)
            }),
            None => 0,
        }
    }
}

#[derive(Clone, Debug)]
struct CompiledRule {
    subjects: SubjectMatcher,
    resource_rules: Box<[ResourceMatcher]>,
    non_resource_rules: Box<[NonResourceMatcher]>,
    /// A resource rule matches every resource request (`*` verbs, API
    /// groups, resources and namespaces, and cluster scope): the rules
    /// need not be walked (the `everything` of most built-in schemas).
    all_resources: bool,
    /// A non-resource rule matches every non-resource request (`*` verbs
    /// and URLs).
    all_non_resources: bool,
}

impl CompiledRule {
    fn new(rule: &PolicyRulesWithSubjects, tables: &mut SubjectTables) -> Self {
        let resource_rules: Box<[ResourceMatcher]> = rule
            .resource_rules
            .iter()
            .map(ResourceMatcher::new)
            .collect();
        let non_resource_rules: Box<[NonResourceMatcher]> = rule
            .non_resource_rules
            .iter()
            .map(NonResourceMatcher::new)
            .collect();
        CompiledRule {
            subjects: SubjectMatcher::new(&rule.subjects, tables),
            all_resources: resource_rules.iter().any(ResourceMatcher::matches_all),
            all_non_resources: non_resource_rules
                .iter()
                .any(NonResourceMatcher::matches_all),
            resource_rules,
            non_resource_rules,
        }
    }

    #[inline]
    fn matches(&self, key: &SubjectKey, d: &RequestDigest<'_>) -> bool {
        if !self.subjects.matches(key, d) {
            return false;
        }
        if d.is_resource_request {
            self.all_resources || self.resource_rules.iter().any(|r| r.matches(d))
        } else {
            self.all_non_resources || self.non_resource_rules.iter().any(|r| r.matches(d))
        }
    }
}

/// Subjects reduce to: anyone at all; exact user names (a service account
/// becomes `system:serviceaccount:<ns>:<name>`); user-name prefixes (every
/// service account of a namespace); group names.
#[derive(Clone, Debug, Default)]
struct SubjectMatcher {
    everyone: bool,
    users: u64,
    prefixes: u64,
    groups: u64,
    spill: Option<Box<Spill>>,
}

/// Names that found no free bit.
#[derive(Clone, Debug, Default)]
struct Spill {
    users: Vec<String>,
    prefixes: Vec<String>,
    groups: Vec<String>,
}

impl SubjectMatcher {
    fn new(subjects: &[Subject], tables: &mut SubjectTables) -> Self {
        let mut m = SubjectMatcher::default();
        let mut spill = Spill::default();
        for subject in subjects {
            // A subject whose member does not fit its kind matches nothing.
            match subject.kind.as_str() {
                "User" => match &subject.user {
                    Some(u) if u.name == WILDCARD => m.everyone = true,
                    Some(u) => add(&mut m.users, &mut spill.users, &mut tables.users, &u.name),
                    None => {}
                },
                "Group" => match &subject.group {
                    Some(g) if g.name == WILDCARD => m.everyone = true,
                    Some(g) => add(
                        &mut m.groups,
                        &mut spill.groups,
                        &mut tables.groups,
                        &g.name,
                    ),
                    None => {}
                },
                "ServiceAccount" => match &subject.service_account {
                    Some(sa) if sa.name == WILDCARD => add(
                        &mut m.prefixes,
                        &mut spill.prefixes,
                        &mut tables.prefixes,
                        &format!("{SERVICE_ACCOUNT_PREFIX}{}:", sa.namespace),
                    ),
                    Some(sa) => add(
                        &mut m.users,
                        &mut spill.users,
                        &mut tables.users,
                        &format!("{SERVICE_ACCOUNT_PREFIX}{}:{}", sa.namespace, sa.name),
                    ),
                    None => {}
                },
                _ => {}
            }
        }
        if !(spill.users.is_empty() && spill.prefixes.is_empty() && spill.groups.is_empty()) {
            m.spill = Some(Box::new(spill));
        }
        m
    }

    fn matches(&self, key: &SubjectKey, d: &RequestDigest<'_>) -> bool {
        self.everyone
            || key.users & self.users != 0
            || key.prefixes & self.prefixes != 0
            || key.groups & self.groups != 0
            || self.spill.as_ref().is_some_and(|s| {
                s.users.iter().any(|u| u == d.user)
                    || s.prefixes.iter().any(|p| d.user.starts_with(p.as_str()))
                    || d.groups.iter().any(|g| s.groups.iter().any(|sg| sg == g))
            })
    }
}

fn add(bits: &mut u64, spill: &mut Vec<String>, table: &mut NameTable, name: &str) {
    match table.intern(name) {
        Some(bit) => *bits |= bit,
        None => spill.push(name.to_string()),
    }
}

#[derive(Clone, Debug)]
struct ResourceMatcher {
    verbs: StrSet,
    api_groups: StrSet,
    /// `resource` or `resource/subresource`.
    resources: StrSet,
    cluster_scope: bool,
    namespaces: StrSet,
}

impl ResourceMatcher {
    fn new(rule: &ResourcePolicyRule) -> Self {
        ResourceMatcher {
            verbs: StrSet::rule_list(&rule.verbs),
            api_groups: StrSet::rule_list(&rule.api_groups),
            resources: StrSet::rule_list(&rule.resources),
            cluster_scope: rule.cluster_scope,
            namespaces: StrSet::rule_list(&rule.namespaces),
        }
    }

    /// Whether it matches every resource request.
    fn matches_all(&self) -> bool {
        let any = |s: &StrSet| matches!(s, StrSet::Any);
        any(&self.verbs)
            && any(&self.api_groups)
            && any(&self.resources)
            && any(&self.namespaces)
            && self.cluster_scope
    }

    fn matches(&self, d: &RequestDigest<'_>) -> bool {
        self.verbs.contains(d.verb)
            && self.resources.contains_joined(d.resource, d.subresource)
            && self.api_groups.contains(d.api_group)
            && if d.namespace.is_empty() {
                self.cluster_scope
            } else {
                self.namespaces.contains(d.namespace)
            }
    }
}

#[derive(Clone, Debug)]
struct NonResourceMatcher {
    verbs: StrSet,
    any_path: bool,
    exact: StrSet,
    /// A rule URL also matches everything below it: `/healthz` matches
    /// `/healthz/etcd`, `/apis/*` matches `/apis/x` (but not `/apis`).
    prefixes: Box<[Box<str>]>,
}

impl NonResourceMatcher {
    fn new(rule: &NonResourcePolicyRule) -> Self {
        let any_path = rule.non_resource_urls.iter().any(|u| u == WILDCARD);
        let exact: Vec<String> = rule
            .non_resource_urls
            .iter()
            .filter(|u| *u != WILDCARD)
            .cloned()
            .collect();
        let prefixes = exact
            .iter()
            .map(|u| {
                let stem = u.strip_suffix('*').unwrap_or(u);
                if stem.ends_with('/') {
                    stem.into()
                } else {
                    format!("{stem}/").into()
                }
            })
            .collect();
        NonResourceMatcher {
            verbs: StrSet::rule_list(&rule.verbs),
            any_path,
            exact: StrSet::exact(&exact),
            prefixes,
        }
    }

    /// Whether it matches every non-resource request.
    fn matches_all(&self) -> bool {
        matches!(self.verbs, StrSet::Any) && self.any_path
    }

    fn matches(&self, d: &RequestDigest<'_>) -> bool {
        self.verbs.contains(d.verb)
            && (self.any_path
                || self.exact.contains(d.path)
                || self.prefixes.iter().any(|p| d.path.starts_with(&**p)))
    }
}

/// A set of strings with a fast path for `*` and for short lists.
#[derive(Clone, Debug)]
enum StrSet {
    Any,
    Few(Box<[Box<str>]>),
    Many(AHashSet<Box<str>>),
}

impl StrSet {
    /// A rule's list: `["*"]` alone means everything (Kubernetes'
    /// `containsString`); otherwise members match literally.
    fn rule_list(list: &[String]) -> Self {
        if list.len() == 1 && list[0] == WILDCARD {
            StrSet::Any
        } else {
            Self::exact(list)
        }
    }

    fn exact(list: &[String]) -> Self {
        if list.len() <= SCAN_LIMIT {
            StrSet::Few(list.iter().map(|s| s.as_str().into()).collect())
        } else {
            StrSet::Many(list.iter().map(|s| s.as_str().into()).collect())
        }
    }

    fn contains(&self, x: &str) -> bool {
        match self {
            StrSet::Any => true,
            StrSet::Few(items) => items.iter().any(|s| **s == *x),
            StrSet::Many(set) => set.contains(x),
        }
    }

    /// Whether the set holds `resource` (no subresource) or
    /// `resource/subresource`, without building the joined string on the
    /// heap.
    fn contains_joined(&self, resource: &str, subresource: &str) -> bool {
        if subresource.is_empty() {
            return self.contains(resource);
        }
        match self {
            StrSet::Any => true,
            StrSet::Few(items) => items.iter().any(|s| is_joined(s, resource, subresource)),
            StrSet::Many(set) => {
                let mut buf = [0u8; 256];
                match join_on_stack(&mut buf, resource, subresource) {
                    Some(joined) => set.contains(joined),
                    None => set.iter().any(|s| is_joined(s, resource, subresource)),
                }
            }
        }
    }
}

/// `candidate == resource + "/" + subresource`.
fn is_joined(candidate: &str, resource: &str, subresource: &str) -> bool {
    candidate.len() == resource.len() + 1 + subresource.len()
        && candidate.starts_with(resource)
        && candidate.as_bytes().get(resource.len()) == Some(&b'/')
        && candidate.ends_with(subresource)
}

fn join_on_stack<'b>(buf: &'b mut [u8; 256], resource: &str, subresource: &str) -> Option<&'b str> {
    let len = resource.len() + 1 + subresource.len();
    if len > buf.len() {
        return None;
    }
    buf[..resource.len()].copy_from_slice(resource.as_bytes());
    buf[resource.len()] = b'/';
    buf[resource.len() + 1..len].copy_from_slice(subresource.as_bytes());
    // Two UTF-8 strings joined by an ASCII byte are UTF-8.
    std::str::from_utf8(&buf[..len]).ok()
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Names of `a`s with at most two bytes turned to `b` or `:`, of
    /// every length up to past the last length bit: names of one length
    /// mostly share their ends and second word, so a look-up that skipped
    /// any byte would find another name.
    fn near_name() -> impl Strategy<Value = String> {
        (
            0..80usize,
            proptest::collection::vec((any::<usize>(), prop_oneof![Just('b'), Just(':')]), 0..3),
        )
            .prop_map(|(len, flips)| {
                let mut name = vec!['a'; len];
                for (at, c) in flips {
                    if len > 0 {
                        name[at % len] = c;
                    }
                }
                name.into_iter().collect()
            })
    }

    proptest! {
        /// Interning and looking up against a plain scan of the names.
        #[test]
        #[cfg_attr(loom, ignore)]
        fn name_table_finds_exactly_the_names_it_has(
            names in proptest::collection::vec(near_name(), 0..80),
            queries in proptest::collection::vec(near_name(), 0..40),
        ) {
            let mut t = NameTable::default();
            let mut plain: Vec<String> = Vec::new();
            for n in &names {
                let bit = t.intern(n);
                let expected = match plain.iter().position(|p| p == n) {
                    Some(i) => Some(1u64 << i),
                    None if plain.len() < 64 => {
                        plain.push(n.clone());
                        Some(1u64 << (plain.len() - 1))
                    }
                    None => None,
                };
                prop_assert_eq!(bit, expected, "intern {:?}", n);
            }
            for q in queries.iter().chain(&names) {
                let expected = plain.iter().position(|p| p == q);
                prop_assert_eq!(t.position(q.as_bytes()), expected, "look up {:?}", q);
            }
        }

        /// A service account's namespace prefixes against `starts_with`
        /// over every prefix (namespaces with `:` and of 63 bytes or more
        /// included, which the length look-up handles apart).
        #[test]
        #[cfg_attr(loom, ignore)]
        fn prefixes_are_exactly_the_ones_the_user_starts_with(
            namespaces in proptest::collection::vec(near_name(), 1..20),
            rest in near_name(),
            pick in any::<usize>(),
            cut in any::<usize>(),
        ) {
            let mut tables = SubjectTables::default();
            let prefixes: Vec<String> = namespaces
                .iter()
                .map(|ns| format!("{SERVICE_ACCOUNT_PREFIX}{ns}:"))
                .collect();
            for p in &prefixes {
                tables.prefixes.intern(p);
            }
            // Often a user of one of the namespaces, cut or extended.
            let base = &prefixes[pick % prefixes.len()];
            let mut user = format!("{base}{rest}");
            if cut % 3 == 0 {
                user.truncate(cut % (user.len() + 1));
            }
            let key = tables.key(&user, &[]);
            let mut expected = 0u64;
            for (i, p) in tables.prefixes.names.iter().enumerate() {
                if user.starts_with(&**p) {
                    expected |= 1 << i;
                }
            }
            prop_assert_eq!(key.prefixes, expected, "user {:?}", user);
        }
    }

    #[test]
    fn name_table_gives_bits_then_spills() {
        let mut t = NameTable::default();
        for i in 0..64 {
            assert_eq!(t.intern(&format!("n{i}")), Some(1 << i));
        }
        assert_eq!(t.intern("n3"), Some(1 << 3));
        assert_eq!(t.intern("one-too-many"), None);
        assert_eq!(t.bit("n63"), 1 << 63);
        assert_eq!(t.bit("n0"), 1);
        assert_eq!(t.bit("one-too-many"), 0);
    }

    #[test]
    fn spilled_subjects_still_match() {
        let mut tables = SubjectTables::default();
        let many: Vec<Subject> = (0..70).map(|i| Subject::group(format!("g{i}"))).collect();
        let m = SubjectMatcher::new(&many, &mut tables);
        assert!(m.spill.is_some());
        for g in ["g0", "g63", "g64", "g69"] {
            let groups = [g];
            let d = RequestDigest {
                groups: &groups,
                ..RequestDigest::default()
            };
            assert!(m.matches(&tables.key("", &groups), &d), "{g}");
        }
        let groups = ["g70"];
        let d = RequestDigest {
            groups: &groups,
            ..RequestDigest::default()
        };
        assert!(!m.matches(&tables.key("", &groups), &d));
    }
}
