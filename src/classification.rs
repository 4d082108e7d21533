//! Classifying a request: the best matching FlowSchema, its priority level,
//! the flow distinguisher and the 64-bit flow hash, as Kubernetes computes
//! them (`matchesFlowSchema`, `computeFlowDistinguisher`, `hashFlowID`).
//!
//! A [`Classifier`] is compiled once from a [`ValidConfig`]: `*` lists become
//! flags, service-account subjects become exact user names or user-name
//! prefixes, every subject name gets a bit (so a request's user and groups
//! are looked up once, not once per schema), a per-schema prefilter skips
//! schemas that cannot match, `/*` URLs become prefixes, and long lists
//! become hash sets. [`Classifier::classify`] then borrows the request's
//! strings and allocates nothing.
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

mod flow_hash_memo;
mod list_query;
mod matchers;
mod owned;
#[cfg(any(test, feature = "testing"))]
#[doc(hidden)]
pub mod reference;
mod request_info;
mod words;

pub use owned::OwnedDigest;
pub use request_info::RequestInfo;

use sha2::{Digest, Sha256};

use crate::config::{
    DistinguisherMethod, ValidConfig, ValidFlowSchema, ValidPriorityLevel, NAME_CATCH_ALL,
};
use matchers::{Candidates, CompiledSchema, SubjectTables};

/// What a request is, as far as classification cares. Every field borrows
/// from the caller; empty strings stand for "none".
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RequestDigest<'a> {
    /// Authenticated user name (`system:serviceaccount:ns:name` for a
    /// service account).
    pub user: &'a str,
    /// The user's groups (`system:authenticated`, `system:serviceaccounts`,
    /// ...), as the authenticator gave them; group subjects match these.
    pub groups: &'a [&'a str],
    /// Kubernetes' verb: `get`, `list`, `watch`, `create`, ... (for a
    /// non-resource request, the lower-case HTTP method).
    pub verb: &'a str,
    /// A request for an API resource (resource rules apply) rather than a
    /// non-resource URL (non-resource rules apply).
    pub is_resource_request: bool,
    /// `""` for the core group.
    pub api_group: &'a str,
    /// The resource (`pods`, `leases`, ...).
    pub resource: &'a str,
    /// The subresource (`status`, `log`, ...), or `""`. Rules name it as
    /// `pods/status`.
    pub subresource: &'a str,
    /// `""` for a cluster-scoped resource.
    pub namespace: &'a str,
    /// The object's name, or `""` for a collection. No flow-schema rule looks
    /// at it (as in Kubernetes).
    pub name: &'a str,
    /// The URL path; what non-resource rules match.
    pub path: &'a str,
}

/// A flow schema as the classifier reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SchemaInfo {
    /// The schema's name.
    pub name: String,
    /// The schema's UID, if the configuration gave one.
    pub uid: Option<String>,
    /// Its matching precedence (lower matches first).
    pub matching_precedence: u32,
    /// Index into [`Classifier::levels`]; `None` for a schema whose level
    /// does not exist (it matches nothing).
    pub level: Option<usize>,
    /// How its requests are told apart into flows; `None`: one flow.
    pub distinguisher: Option<DistinguisherMethod>,
}

/// A priority level as the classifier reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LevelInfo {
    /// The level's name.
    pub name: String,
    /// The level's UID, if the configuration gave one.
    pub uid: Option<String>,
    /// Whether the level is exempt (its requests execute at once).
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
    /// The matched flow schema.
    pub schema: &'c SchemaInfo,
    /// Its priority level.
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
    tables: SubjectTables,
    /// In matching order; schemas that dangle are left out.
    compiled: Box<[CompiledSchema]>,
    /// The schemas a request's subjects can match, by subject bit (at
    /// most 64 compiled schemas; otherwise every prefilter is tested).
    candidates: Option<Candidates>,
    catch_all: usize,
}

impl Classifier {
    /// Compiles the matchers of a validated configuration (see the module
    /// documentation); [`Classifier::classify`] then allocates nothing.
    pub fn new(config: &ValidConfig) -> Classifier {
        let levels: Box<[LevelInfo]> = config.priority_levels().iter().map(level_info).collect();
        let schemas: Box<[SchemaInfo]> = config.flow_schemas().iter().map(schema_info).collect();
        let mut tables = SubjectTables::default();
        let compiled: Box<[CompiledSchema]> = config
            .flow_schemas()
            .iter()
            .enumerate()
            .filter_map(|(index, fs)| {
                let level = fs.priority_level?;
                Some(CompiledSchema::new(
                    index,
                    fs,
                    &levels[level],
                    level,
                    &mut tables,
                ))
            })
            .collect();
        // Validation guarantees the catch-all schema and its level exist.
        let catch_all = schemas
            .iter()
            .position(|s| s.name == NAME_CATCH_ALL && s.level.is_some())
            .unwrap_or(0);
        let candidates = Candidates::new(&compiled);
        Classifier {
            schemas,
            levels,
            tables,
            compiled,
            candidates,
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
    /// none does. Computes the flow hash too.
    #[inline]
    pub fn classify<'c, 'r>(&'c self, digest: &RequestDigest<'r>) -> Classification<'c, 'r> {
        let (mut c, compiled) = self.find(digest);
        if let Some(s) = compiled {
            c.flow_hash = s.flow_hash(c.flow_distinguisher);
        }
        c
    }

    /// [`Classifier::classify`] without the flow hash (`flow_hash` is 0),
    /// for a caller that needs it only when a request must be queued: the
    /// hash (one SHA-256 block) costs about as much as the matching.
    pub fn classify_deferred<'c, 'r>(
        &'c self,
        digest: &RequestDigest<'r>,
    ) -> Classification<'c, 'r> {
        self.find(digest).0
    }

    #[inline]
    fn find<'c, 'r>(
        &'c self,
        digest: &RequestDigest<'r>,
    ) -> (Classification<'c, 'r>, Option<&'c CompiledSchema>) {
        let key = self.tables.key(digest.user, digest.groups);
        let is_resource = digest.is_resource_request;
        let first = match &self.candidates {
            Some(candidates) => {
                let mut first = None;
                let mut mask = candidates.of(&key, is_resource);
                while mask != 0 {
                    let s = &self.compiled[mask.trailing_zeros() as usize];
                    if s.matches(&key, digest) {
                        first = Some(s);
                        break;
                    }
                    mask &= mask - 1;
                }
                first
            }
            None => self
                .compiled
                .iter()
                .find(|s| s.prefilter.passes(&key, is_resource) && s.matches(&key, digest)),
        };
        let (compiled, fallback) = match first {
            Some(s) => (Some(s), false),
            None => (
                self.compiled.iter().find(|s| s.index == self.catch_all),
                true,
            ),
        };
        let (schema_index, level_index, flow_distinguisher) = match compiled {
            Some(s) => (s.index, s.level, s.distinguisher(digest)),
            None => (
                self.catch_all,
                self.schemas[self.catch_all].level.unwrap_or(0),
                "",
            ),
        };
        let c = Classification {
            schema_index,
            level_index,
            schema: &self.schemas[schema_index],
            level: &self.levels[level_index],
            flow_distinguisher,
            flow_hash: 0,
            fallback,
        };
        (c, compiled)
    }

    /// The flow hash of a classification: Kubernetes' `hashFlowID` of its
    /// schema and distinguisher, or 0 when its level deals no queues.
    pub fn flow_hash(&self, c: &Classification<'_, '_>) -> u64 {
        self.compiled
            .iter()
            .find(|s| s.index == c.schema_index)
            .map_or(0, |s| s.flow_hash(c.flow_distinguisher))
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

#[cfg(all(test, not(loom)))]
mod tests;
