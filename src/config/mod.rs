//! API Priority and Fairness configuration in Kubernetes' own shape:
//! FlowSchema and PriorityLevelConfiguration objects of
//! `flowcontrol.apiserver.k8s.io/v1` (v1beta3 accepted on input).
//!
//! ```
//! use apf::config::Config;
//!
//! let yaml = r#"
//! apiVersion: flowcontrol.apiserver.k8s.io/v1
//! kind: PriorityLevelConfiguration
//! metadata: {name: batch}
//! spec:
//!   type: Limited
//!   limited:
//!     limitResponse: {type: Queue, queuing: {queues: 16, handSize: 4}}
//! "#;
//! let config = Config::from_yaml_str(yaml).unwrap();
//! // Kubernetes' defaults were applied when reading ...
//! let queuing = config.priority_levels[0].spec.limited.as_ref().unwrap();
//! assert_eq!(queuing.nominal_concurrency_shares, Some(30));
//! // ... and validation adds the mandatory objects the file lacks.
//! let valid = config.validate().unwrap();
//! assert!(valid.priority_level_index("exempt").is_some());
//! assert!(valid.flow_schema_index("catch-all").is_some());
//! ```
//!
//! Loading reads what the text says and applies Kubernetes' defaulting;
//! [`Config::validate`] checks every rule the API server checks and returns
//! either every error found or a [`ValidConfig`] from which a
//! [`crate::classification::Classifier`] is compiled.

mod builtin;
mod cost;
mod defaults;
mod error;
mod fairness;
mod load;
mod model;
mod print;
mod types;
mod validate;

pub use cost::{cost_mode, CostMode, COST_ANNOTATION};
pub use error::{ConfigError, ConfigErrors, ErrorType, ObjectRef};
pub use fairness::FAIRNESS_ANNOTATION;
pub use model::{
    DistinguisherMethod, LevelKind, LimitPolicy, Notice, QueuingParams, ValidConfig,
    ValidFlowSchema, ValidPriorityLevel,
};
pub use types::*;
pub use validate::{
    required_entropy_bits, ChangedMandatory, DanglingReferences, ValidateOptions, MAX_HASH_BITS,
};

/// A set of FlowSchema and PriorityLevelConfiguration objects, as read
/// (with Kubernetes' defaults applied) and not yet validated.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Config {
    /// The PriorityLevelConfiguration objects, in input order.
    pub priority_levels: Vec<PriorityLevelConfiguration>,
    /// The FlowSchema objects, in input order (matching order is by
    /// `matchingPrecedence`, then name, decided at validation).
    pub flow_schemas: Vec<FlowSchema>,
}

impl Config {
    /// Kubernetes' bootstrap configuration: the mandatory and the suggested
    /// objects. The configuration to use when the user supplies none.
    pub fn builtin() -> Config {
        let mut priority_levels = builtin::mandatory_priority_levels();
        priority_levels.extend(builtin::suggested_priority_levels());
        let mut flow_schemas = builtin::mandatory_flow_schemas();
        flow_schemas.extend(builtin::suggested_flow_schemas());
        Config {
            priority_levels,
            flow_schemas,
        }
    }

    /// Only the mandatory objects: `exempt` and `catch-all`, each a priority
    /// level and a flow schema.
    pub fn mandatory() -> Config {
        Config {
            priority_levels: builtin::mandatory_priority_levels(),
            flow_schemas: builtin::mandatory_flow_schemas(),
        }
    }

    /// This configuration with `overrides` applied as a cluster applies
    /// objects: an object of `overrides` replaces the one of the same kind
    /// and name (in its place), the others are added after. How `apf
    /// simulate --config` puts a file on top of the built-in objects.
    pub fn with_overrides(&self, overrides: &Config) -> Config {
        fn merge<T: Clone>(base: &[T], top: &[T], name: impl Fn(&T) -> &str) -> Vec<T> {
            let mut out: Vec<T> = base.to_vec();
            for object in top {
                match out.iter().position(|o| name(o) == name(object)) {
                    Some(i) => out[i] = object.clone(),
                    None => out.push(object.clone()),
                }
            }
            out
        }
        Config {
            priority_levels: merge(&self.priority_levels, &overrides.priority_levels, |p| {
                &p.metadata.name
            }),
            flow_schemas: merge(&self.flow_schemas, &overrides.flow_schemas, |f| {
                &f.metadata.name
            }),
        }
    }

    /// Whether the configuration holds no object at all.
    pub fn is_empty(&self) -> bool {
        self.priority_levels.is_empty() && self.flow_schemas.is_empty()
    }

    /// Reads YAML: one object, a `List` (as `kubectl get
    /// flowschemas,prioritylevelconfigurations -o yaml` prints), a typed
    /// list, or several documents separated by `---`.
    ///
    /// Fails with every problem found (syntax, wrong types, unknown `spec`
    /// fields, unknown kinds), each naming the document or object and the
    /// field. Values are checked later, by [`Config::validate`].
    pub fn from_yaml_str(text: &str) -> Result<Config, ConfigErrors> {
        load::from_yaml(text)
    }

    /// Reads JSON: one object or list, or several one after another.
    pub fn from_json_str(text: &str) -> Result<Config, ConfigErrors> {
        load::from_json(text)
    }

    /// Reads bytes in either format (JSON if they start with `{` or `[`).
    ///
    /// Every reader refuses input over 16 MiB or over 200,000 YAML/JSON
    /// nodes (before building anything), and input with no objects, with
    /// an error; it never panics on input.
    pub fn from_slice(bytes: &[u8]) -> Result<Config, ConfigErrors> {
        load::from_slice(bytes)
    }

    /// Prints the configuration as a `v1` `List` that `kubectl apply -f`
    /// accepts and [`Config::from_yaml_str`] reads back unchanged.
    pub fn to_yaml(&self) -> String {
        print::to_yaml(self)
    }

    /// The same `List` in JSON.
    pub fn to_json(&self) -> String {
        print::to_json(self)
    }

    /// Validates with the default options: a flow schema naming a missing
    /// priority level is kept, matches nothing and is named in the notices
    /// (as Kubernetes does); changed mandatory objects are errors.
    pub fn validate(&self) -> Result<ValidConfig, ConfigErrors> {
        validate::validate(self, &ValidateOptions::default())
    }

    /// Validates with the given options.
    pub fn validate_with(&self, options: &ValidateOptions) -> Result<ValidConfig, ConfigErrors> {
        validate::validate(self, options)
    }

    /// Validates with the given options, and gives the notices (mandatory
    /// objects added, dangling schemas ignored, ...) whether or not the
    /// configuration is valid: on success they are
    /// [`ValidConfig::notices`]; beside errors they say what else a fixed
    /// configuration will meet.
    pub fn validate_with_notices(
        &self,
        options: &ValidateOptions,
    ) -> (Result<ValidConfig, ConfigErrors>, Vec<Notice>) {
        validate::validate_noting(self, options)
    }

    /// Adds the mandatory objects this configuration lacks (validation does
    /// this on its own copy); returns what was added.
    pub fn ensure_mandatory(&mut self) -> Vec<Notice> {
        validate::ensure_mandatory(self)
    }
}

#[cfg(all(test, not(loom)))]
mod tests;
