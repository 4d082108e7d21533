//! Errors from loading and validating a configuration.
//!
//! Each error names the object (kind and name, or where it sits in the input
//! when it has no name) and the field path, and reads like the API server's
//! own field errors: `FlowSchema "x": spec.matchingPrecedence: Invalid value:
//! 0: must be a positive value`.

use crate::input::clip;
use std::fmt;

/// Which object an error is about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectRef {
    /// `FlowSchema`, `PriorityLevelConfiguration`, or for input that is not
    /// (yet) an object, `Document`.
    pub kind: String,
    /// The object's `metadata.name`; empty when unknown.
    pub name: String,
    /// Where in the input: `document 2, items[3]`. Empty for objects not
    /// read from text (built in, or constructed in code).
    pub location: String,
}

impl ObjectRef {
    /// A reference to the object of this kind and name, with no input location.
    pub fn new(kind: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            kind: kind.into(),
            name: name.into(),
            location: String::new(),
        }
    }

    pub(crate) fn document(location: impl Into<String>) -> Self {
        Self {
            kind: "Document".into(),
            name: String::new(),
            location: location.into(),
        }
    }
}

impl fmt::Display for ObjectRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.kind)?;
        if !self.name.is_empty() {
            write!(f, " {:?}", clip(&self.name, MAX_QUOTED_NAME))?;
        }
        if !self.location.is_empty() {
            write!(f, " ({})", self.location)?;
        }
        Ok(())
    }
}

/// The kinds of field error the API server uses, plus `Parse` for input
/// that could not be read as an object at all.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorType {
    /// A required field is missing or empty.
    Required,
    /// A value out of range or malformed.
    Invalid,
    /// A value outside the supported set (an unknown `type`, for one).
    NotSupported,
    /// A field that must not be set here (a namespace on a cluster-scoped
    /// object, `spec.limited` on an exempt level).
    Forbidden,
    /// A name or list entry that appears twice.
    Duplicate,
    /// A reference to an object that does not exist (a dangling priority
    /// level reference).
    NotFound,
    /// Syntax errors, wrong types, unknown spec fields, unknown kinds.
    Parse,
}

impl ErrorType {
    fn phrase(self) -> &'static str {
        match self {
            ErrorType::Required => "Required value",
            ErrorType::Invalid => "Invalid value",
            ErrorType::NotSupported => "Unsupported value",
            ErrorType::Forbidden => "Forbidden",
            ErrorType::Duplicate => "Duplicate value",
            ErrorType::NotFound => "Not found",
            ErrorType::Parse => "Parse error",
        }
    }
}

/// One problem with one field of one object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    /// The object at fault.
    pub object: ObjectRef,
    /// Field path, `spec.limited.limitResponse.queuing.handSize`; empty when
    /// the problem is the whole input.
    pub field: String,
    /// What kind of problem it is.
    pub error_type: ErrorType,
    /// The offending value as the API server would print it, if any.
    pub value: Option<String>,
    /// Why, in words (may be empty).
    pub detail: String,
}

impl ConfigError {
    /// A configuration with no objects at all (an empty file, an empty
    /// `List`): refused as kubectl refuses to apply nothing.
    pub fn no_objects() -> ConfigError {
        ConfigError {
            object: ObjectRef::document("input"),
            field: String::new(),
            error_type: ErrorType::Required,
            value: None,
            detail: "no FlowSchema or PriorityLevelConfiguration objects (an empty configuration \
                     would silently drop every suggested object; `apf defaults` prints the built-in ones)"
                .into(),
        }
    }
}

/// Errors quote at most this much of a name, and of a value or detail:
/// enough to recognise it, never a 50 MB echo.
const MAX_QUOTED_NAME: usize = 128;
const MAX_QUOTED_TEXT: usize = 512;

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: ", self.object)?;
        if !self.field.is_empty() {
            write!(f, "{}: ", self.field)?;
        }
        f.write_str(self.error_type.phrase())?;
        if let Some(value) = &self.value {
            write!(f, ": {}", clip(value, MAX_QUOTED_TEXT))?;
        }
        if !self.detail.is_empty() {
            write!(f, ": {}", clip(&self.detail, MAX_QUOTED_TEXT))?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigError {}

/// Every error found, in input order; never empty when returned as an error.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl ConfigErrors {
    /// The errors, in input order.
    pub fn iter(&self) -> std::slice::Iter<'_, ConfigError> {
        self.0.iter()
    }

    /// How many errors there are.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there are none (never the case for a returned error).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether some error is about `field` of the object named `name`.
    pub fn has(&self, name: &str, field: &str) -> bool {
        self.0
            .iter()
            .any(|e| e.object.name == name && e.field == field)
    }
}

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}

impl IntoIterator for ConfigErrors {
    type Item = ConfigError;
    type IntoIter = std::vec::IntoIter<ConfigError>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

impl<'a> IntoIterator for &'a ConfigErrors {
    type Item = &'a ConfigError;
    type IntoIter = std::slice::Iter<'a, ConfigError>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

/// Collects the errors of one object, each with its field path.
pub(crate) struct ErrorSink<'a> {
    object: ObjectRef,
    out: &'a mut Vec<ConfigError>,
}

impl<'a> ErrorSink<'a> {
    pub(crate) fn new(object: ObjectRef, out: &'a mut Vec<ConfigError>) -> Self {
        Self { object, out }
    }

    pub(crate) fn push(
        &mut self,
        field: impl Into<String>,
        error_type: ErrorType,
        value: Option<String>,
        detail: impl Into<String>,
    ) {
        self.out.push(ConfigError {
            object: self.object.clone(),
            field: field.into(),
            error_type,
            value,
            detail: detail.into(),
        });
    }

    pub(crate) fn required(&mut self, field: impl Into<String>, detail: impl Into<String>) {
        self.push(field, ErrorType::Required, None, detail);
    }

    pub(crate) fn invalid(
        &mut self,
        field: impl Into<String>,
        value: impl fmt::Display,
        detail: impl Into<String>,
    ) {
        self.push(field, ErrorType::Invalid, Some(value.to_string()), detail);
    }

    pub(crate) fn forbidden(&mut self, field: impl Into<String>, detail: impl Into<String>) {
        self.push(field, ErrorType::Forbidden, None, detail);
    }

    pub(crate) fn not_supported(
        &mut self,
        field: impl Into<String>,
        value: impl fmt::Display,
        supported: &[&str],
    ) {
        let list = supported
            .iter()
            .map(|s| format!("{s:?}"))
            .collect::<Vec<_>>()
            .join(", ");
        self.push(
            field,
            ErrorType::NotSupported,
            Some(value.to_string()),
            format!("supported values: {list}"),
        );
    }
}
