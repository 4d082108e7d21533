//! Classifying a request: the best matching FlowSchema, its priority level,
//! the flow distinguisher and the 64-bit flow hash, as Kubernetes computes
//! them (`matchesFlowSchema`, `computeFlowDistinguisher`, `hashFlowID`).
//!
//! A [`Classifier`] is compiled once from a [`ValidConfig`]: `*` lists become
//! flags, service-account subjects become exact user names or user-name
//! prefixes, `/*` URLs become prefixes, and large lists become hash sets.
//! [`Classifier::classify`] then borrows the request's strings and allocates
//! nothing.
//!
//! ```
//! use apf::classification::{Classifier, RequestDigest};
//! use apf::config::Config;
//!
//! let classifier = Classifier::new(&Config::builtin().validate().unwrap());
//! let lease_renewal = RequestDigest {
//!     user: "system:node:n1",
//!     groups: &["system:nodes", "system:authenticated"],
//!     verb: "update",
//!     is_resource_request: true,
//!     api_group: "coordination.k8s.io",
//!     resource: "leases",
//!     namespace: "kube-node-lease",
//!     name: "n1",
//!     path: "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n1",
//!     ..RequestDigest::default()
//! };
//! let c = classifier.classify(&lease_renewal);
//! assert_eq!(c.schema.name, "system-node-high");
//! assert_eq!(c.level.name, "node-high");
//! assert_eq!(c.flow_distinguisher, "system:node:n1");
//! ```

pub mod reference;

use ahash::AHashSet;
use sha2::{Digest, Sha256};

use crate::config::{
    DistinguisherMethod, NonResourcePolicyRule, PolicyRulesWithSubjects, ResourcePolicyRule,
    Subject, ValidConfig, ValidFlowSchema, ValidPriorityLevel, NAME_CATCH_ALL, WILDCARD,
};

/// What a request is, as far as classification cares. Every field borrows
/// from the caller; empty strings stand for "none".
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RequestDigest<'a> {
    /// Authenticated user name (`system:serviceaccount:ns:name` for a
    /// service account).
    pub user: &'a str,
    pub groups: &'a [&'a str],
    /// Kubernetes' verb: `get`, `list`, `watch`, `create`, ... (for a
    /// non-resource request, the lower-case HTTP method).
    pub verb: &'a str,
    pub is_resource_request: bool,
    /// `""` for the core group.
    pub api_group: &'a str,
    pub resource: &'a str,
    pub subresource: &'a str,
    /// `""` for a cluster-scoped resource.
    pub namespace: &'a str,
    pub name: &'a str,
    /// The URL path; what non-resource rules match.
    pub path: &'a str,
}

/// A flow schema as the classifier reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SchemaInfo {
    pub name: String,
    pub uid: Option<String>,
    pub matching_precedence: u32,
    /// Index into [`Classifier::levels`]; `None` for a schema whose level
    /// does not exist (it matches nothing).
    pub level: Option<usize>,
    pub distinguisher: Option<DistinguisherMethod>,
}

/// A priority level as the classifier reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LevelInfo {
    pub name: String,
    pub uid: Option<String>,
    pub exempt: bool,
    /// Queues requests are dealt among; 0 for exempt and rejecting levels.
    pub queues: u32,
}

/// The outcome of classifying one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Classification<'c, 'r> {
    /// Index into [`Classifier::schemas`], which is also the index into
    /// [`ValidConfig::flow_schemas`].
    pub schema_index: usize,
    /// Index into [`Classifier::levels`], also into
    /// [`ValidConfig::priority_levels`].
    pub level_index: usize,
    pub schema: &'c SchemaInfo,
    pub level: &'c LevelInfo,
    /// The user name or namespace that tells this request's flow apart;
    /// empty when the schema has no method, and (as in Kubernetes) whenever
    /// the level has fewer than two queues, since nothing is dealt then.
    pub flow_distinguisher: &'r str,
    /// Hash of the schema name and distinguisher, exactly Kubernetes'
    /// `hashFlowID`; 0 whenever the distinguisher is not computed.
    pub flow_hash: u64,
    /// No schema matched and the catch-all schema was taken anyway, as
    /// Kubernetes does (for a user in neither `system:authenticated` nor
    /// `system:unauthenticated`).
    pub fallback: bool,
}

/// Matchers compiled from a validated configuration.
#[derive(Clone, Debug)]
pub struct Classifier {
    schemas: Box<[SchemaInfo]>,
    levels: Box<[LevelInfo]>,
    /// In matching order; schemas that dangle are left out.
    compiled: Box<[CompiledSchema]>,
    catch_all: usize,
}

impl Classifier {
    pub fn new(config: &ValidConfig) -> Classifier {
        let levels: Box<[LevelInfo]> = config.priority_levels().iter().map(level_info).collect();
        let schemas: Box<[SchemaInfo]> = config.flow_schemas().iter().map(schema_info).collect();
        let compiled = config
            .flow_schemas()
            .iter()
            .enumerate()
            .filter_map(|(index, fs)| {
                let level = fs.priority_level?;
                Some(CompiledSchema::new(index, fs, &levels[level], level))
            })
            .collect();
        // Validation guarantees the catch-all schema and its level exist.
        let catch_all = schemas
            .iter()
            .position(|s| s.name == NAME_CATCH_ALL && s.level.is_some())
            .unwrap_or(0);
        Classifier {
            schemas,
            levels,
            compiled,
            catch_all,
        }
    }

    /// All flow schemas, in matching order.
    pub fn schemas(&self) -> &[SchemaInfo] {
        &self.schemas
    }

    /// All priority levels, in the configuration's order.
    pub fn levels(&self) -> &[LevelInfo] {
        &self.levels
    }

    /// The best matching schema: the first in order of matching precedence,
    /// then name, whose rules accept the request; the catch-all schema when
    /// none does.
    pub fn classify<'c, 'r>(&'c self, digest: &RequestDigest<'r>) -> Classification<'c, 'r> {
        let (compiled, fallback) = match self.compiled.iter().find(|s| s.matches(digest)) {
            Some(s) => (Some(s), false),
            None => (
                self.compiled.iter().find(|s| s.index == self.catch_all),
                true,
            ),
        };
        let (schema_index, level_index, flow_distinguisher, flow_hash) = match compiled {
            Some(s) => {
                let (distinguisher, hash) = s.flow(digest);
                (s.index, s.level, distinguisher, hash)
            }
            None => (
                self.catch_all,
                self.schemas[self.catch_all].level.unwrap_or(0),
                "",
                0,
            ),
        };
        Classification {
            schema_index,
            level_index,
            schema: &self.schemas[schema_index],
            level: &self.levels[level_index],
            flow_distinguisher,
            flow_hash,
            fallback,
        }
    }
}

/// Kubernetes' `hashFlowID`: the first 8 bytes, little-endian, of the
/// SHA-256 of the schema name, a zero byte, and the distinguisher. Equal
/// hashes give equal hands of queues, so flows land in the same queues as
/// they would on Kubernetes.
pub fn hash_flow_id(schema_name: &str, distinguisher: &str) -> u64 {
    finish_flow_hash(flow_hash_prefix(schema_name), distinguisher)
}

fn flow_hash_prefix(schema_name: &str) -> Sha256 {
    let mut hasher = Sha256::new();
    hasher.update(schema_name.as_bytes());
    hasher.update([0u8]);
    hasher
}

fn finish_flow_hash(mut hasher: Sha256, distinguisher: &str) -> u64 {
    hasher.update(distinguisher.as_bytes());
    let sum = hasher.finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&sum[..8]);
    u64::from_le_bytes(first)
}

fn level_info(level: &ValidPriorityLevel) -> LevelInfo {
    LevelInfo {
        name: level.name.clone(),
        uid: level.uid.clone(),
        exempt: level.is_exempt(),
        queues: level.queues(),
    }
}

fn schema_info(schema: &ValidFlowSchema) -> SchemaInfo {
    SchemaInfo {
        name: schema.name.clone(),
        uid: schema.uid.clone(),
        matching_precedence: schema.matching_precedence,
        level: schema.priority_level,
        distinguisher: schema.distinguisher,
    }
}

#[derive(Clone, Debug)]
struct CompiledSchema {
    index: usize,
    level: usize,
    rules: Box<[CompiledRule]>,
    distinguisher: Option<DistinguisherMethod>,
    /// SHA-256 state with the schema name and separator already absorbed;
    /// `None` when the level has fewer than two queues and no flow is
    /// computed.
    flow_hasher: Option<Sha256>,
}

impl CompiledSchema {
    fn new(index: usize, fs: &ValidFlowSchema, level: &LevelInfo, level_index: usize) -> Self {
        CompiledSchema {
            index,
            level: level_index,
            rules: fs.rules.iter().map(CompiledRule::new).collect(),
            distinguisher: fs.distinguisher,
            flow_hasher: (level.queues > 1).then(|| flow_hash_prefix(&fs.name)),
        }
    }

    fn matches(&self, d: &RequestDigest<'_>) -> bool {
        self.rules.iter().any(|r| r.matches(d))
    }

    fn flow<'r>(&self, d: &RequestDigest<'r>) -> (&'r str, u64) {
        let Some(hasher) = &self.flow_hasher else {
            return ("", 0);
        };
        let distinguisher = match self.distinguisher {
            None => "",
            Some(DistinguisherMethod::ByUser) => d.user,
            Some(DistinguisherMethod::ByNamespace) => d.namespace,
        };
        (
            distinguisher,
            finish_flow_hash(hasher.clone(), distinguisher),
        )
    }
}

#[derive(Clone, Debug)]
struct CompiledRule {
    subjects: SubjectMatcher,
    resource_rules: Box<[ResourceMatcher]>,
    non_resource_rules: Box<[NonResourceMatcher]>,
}

impl CompiledRule {
    fn new(rule: &PolicyRulesWithSubjects) -> Self {
        CompiledRule {
            subjects: SubjectMatcher::new(&rule.subjects),
            resource_rules: rule
                .resource_rules
                .iter()
                .map(ResourceMatcher::new)
                .collect(),
            non_resource_rules: rule
                .non_resource_rules
                .iter()
                .map(NonResourceMatcher::new)
                .collect(),
        }
    }

    fn matches(&self, d: &RequestDigest<'_>) -> bool {
        if !self.subjects.matches(d.user, d.groups) {
            return false;
        }
        if d.is_resource_request {
            self.resource_rules.iter().any(|r| r.matches(d))
        } else {
            self.non_resource_rules.iter().any(|r| r.matches(d))
        }
    }
}

const SERVICE_ACCOUNT_PREFIX: &str = "system:serviceaccount:";

/// Subjects reduce to: anyone at all; exact user names (service accounts
/// become `system:serviceaccount:<ns>:<name>`); user-name prefixes (every
/// service account of a namespace); group names.
#[derive(Clone, Debug)]
struct SubjectMatcher {
    everyone: bool,
    users: StrSet,
    user_prefixes: Box<[Box<str>]>,
    groups: StrSet,
}

impl SubjectMatcher {
    fn new(subjects: &[Subject]) -> Self {
        let mut everyone = false;
        let mut users = Vec::new();
        let mut user_prefixes = Vec::new();
        let mut groups = Vec::new();
        for subject in subjects {
            // A subject whose member does not fit its kind matches nothing.
            match subject.kind.as_str() {
                "User" => match &subject.user {
                    Some(u) if u.name == WILDCARD => everyone = true,
                    Some(u) => users.push(u.name.clone()),
                    None => {}
                },
                "Group" => match &subject.group {
                    Some(g) if g.name == WILDCARD => everyone = true,
                    Some(g) => groups.push(g.name.clone()),
                    None => {}
                },
                "ServiceAccount" => match &subject.service_account {
                    Some(sa) if sa.name == WILDCARD => user_prefixes
                        .push(format!("{SERVICE_ACCOUNT_PREFIX}{}:", sa.namespace).into()),
                    Some(sa) => users.push(format!(
                        "{SERVICE_ACCOUNT_PREFIX}{}:{}",
                        sa.namespace, sa.name
                    )),
                    None => {}
                },
                _ => {}
            }
        }
        SubjectMatcher {
            everyone,
            users: StrSet::exact(&users),
            user_prefixes: user_prefixes.into(),
            groups: StrSet::exact(&groups),
        }
    }

    fn matches(&self, user: &str, groups: &[&str]) -> bool {
        self.everyone
            || self.users.contains(user)
            || self.user_prefixes.iter().any(|p| user.starts_with(&**p))
            || (!self.groups.is_empty() && groups.iter().any(|g| self.groups.contains(g)))
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

    fn matches(&self, d: &RequestDigest<'_>) -> bool {
        self.verbs.contains(d.verb)
            && (self.any_path
                || self.exact.contains(d.path)
                || self.prefixes.iter().any(|p| d.path.starts_with(&**p)))
    }
}

/// Lists at most this long are scanned; longer ones are hashed.
const SCAN_LIMIT: usize = 8;

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

    fn is_empty(&self) -> bool {
        match self {
            StrSet::Any => false,
            StrSet::Few(items) => items.is_empty(),
            StrSet::Many(set) => set.is_empty(),
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
        && candidate.as_bytes()[resource.len()] == b'/'
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

#[cfg(test)]
mod tests;
