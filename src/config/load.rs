//! Reading FlowSchema and PriorityLevelConfiguration objects from YAML or
//! JSON: single objects, `List`s (`kubectl get ... -o yaml`), typed lists
//! (`FlowSchemaList`, as the API returns them), and multi-document YAML.
//!
//! Every document is first read into a generic tree so that an object that
//! fails to decode can still be named in the error, and so that one bad
//! object does not hide the errors of the next.

use serde_json::{Map, Value};

use super::defaults::{default_flow_schema, default_priority_level, SourceVersion};
use super::error::{ConfigError, ConfigErrors, ErrorType, ObjectRef};
use super::types::*;
use super::Config;
use crate::input;

/// Text in YAML (one or more documents; JSON is YAML too).
///
/// The parser enforces the shared budget ([`crate::input`]: size, nesting,
/// node count, alias expansion), so hostile input fails fast instead of
/// exhausting time or memory. When the text does not parse, each document is
/// parsed on its own so that every document's errors are reported, not only
/// the first one's.
pub(crate) fn from_yaml(text: &str) -> Result<Config, ConfigErrors> {
    let text = strip_bom(text);
    check_size(text)?;
    let mut loader = Loader::default();
    match serde_saphyr::from_multiple_with_options::<Value>(text, input::yaml_options()) {
        Ok(documents) => {
            for (i, value) in documents.into_iter().enumerate() {
                loader.document(value, &format!("document {}", i + 1));
            }
        }
        Err(whole) => {
            let documents = split_documents(text);
            if documents.len() <= 1 {
                loader.parse_error(
                    ObjectRef::document("YAML input"),
                    "",
                    input::yaml_error(&whole),
                );
            } else {
                for (i, (first_line, document)) in documents.into_iter().enumerate() {
                    loader.yaml_document(document, first_line, &format!("document {}", i + 1));
                }
            }
        }
    }
    loader.finish()
}

/// Text in JSON: one value, or several one after another.
pub(crate) fn from_json(text: &str) -> Result<Config, ConfigErrors> {
    let text = strip_bom(text);
    check_size(text)?;
    let mut loader = Loader::default();
    for (i, value) in input::json_values(text).into_iter().enumerate() {
        let location = format!("document {}", i + 1);
        match value {
            Ok(value) => loader.document(value, &location),
            // `json_values` stops here: the stream cannot resynchronise
            // after a syntax error.
            Err(e) => loader.parse_error(ObjectRef::document(location), "", e.to_string()),
        }
    }
    loader.finish()
}

fn check_size(text: &str) -> Result<(), ConfigErrors> {
    if text.len() > input::MAX_INPUT_BYTES {
        return Err(too_large(text.len()));
    }
    Ok(())
}

fn too_large(len: usize) -> ConfigErrors {
    ConfigErrors(vec![ConfigError {
        object: ObjectRef::document("input"),
        field: String::new(),
        error_type: ErrorType::Parse,
        value: None,
        detail: input::too_large(Some(len)),
    }])
}

/// The documents of a YAML stream, each with the line (from 1) it starts
/// on. A document marker `---` at the start of a line always begins a new
/// document (YAML forbids it inside content); directives and comments before
/// a marker stay with the document that follows, trailing ones with the
/// last document.
fn split_documents(text: &str) -> Vec<(usize, &str)> {
    // (first line, byte offset) of each document.
    let mut starts = vec![(1, 0)];
    // Whether the current document has content yet: a chunk holding only
    // directives, comments or blanks is not a document of its own.
    let mut has_content = false;
    let mut offset = 0;
    for (i, line) in text.split_inclusive('\n').enumerate() {
        let bare = line.trim_end_matches(['\n', '\r']);
        let is_marker = bare == "---" || bare.starts_with("--- ") || bare.starts_with("---\t");
        if is_marker && has_content {
            starts.push((i + 1, offset));
            has_content = false;
        }
        let trimmed = bare.trim_start();
        if !(trimmed.is_empty() || trimmed.starts_with('#') || bare.starts_with('%')) {
            has_content = true;
        }
        offset += line.len();
    }
    if !has_content && starts.len() > 1 {
        starts.pop();
    }
    let mut documents = Vec::with_capacity(starts.len());
    for (k, &(line, begin)) in starts.iter().enumerate() {
        let end = starts.get(k + 1).map_or(text.len(), |&(_, e)| e);
        documents.push((line, &text[begin..end]));
    }
    documents
}

/// Bytes in either format: JSON when the first non-blank character opens a
/// JSON object or array, YAML otherwise.
pub(crate) fn from_slice(bytes: &[u8]) -> Result<Config, ConfigErrors> {
    if bytes.len() > input::MAX_INPUT_BYTES {
        return Err(too_large(bytes.len()));
    }
    let text = std::str::from_utf8(bytes).map_err(|e| {
        ConfigErrors(vec![ConfigError {
            object: ObjectRef::document("input"),
            field: String::new(),
            error_type: ErrorType::Parse,
            value: None,
            detail: format!("not UTF-8: {e}"),
        }])
    })?;
    let first = strip_bom(text).trim_start().chars().next();
    if matches!(first, Some('{') | Some('[')) {
        from_json(text)
    } else {
        from_yaml(text)
    }
}

fn strip_bom(text: &str) -> &str {
    text.strip_prefix('\u{feff}').unwrap_or(text)
}

#[derive(Default)]
struct Loader {
    config: Config,
    errors: Vec<ConfigError>,
}

/// `apiVersion` and `kind` an item of a typed list inherits when it does not
/// say its own.
struct Inherited<'a> {
    api_version: Option<&'a str>,
    kind: Option<&'a str>,
}

impl Loader {
    fn finish(mut self) -> Result<Config, ConfigErrors> {
        // As kubectl refuses to apply nothing: an empty file is a mistake
        // (a wrong path, a truncated download), not a request for only the
        // mandatory objects.
        if self.errors.is_empty() && self.config.is_empty() {
            self.errors.push(ConfigError::no_objects());
        }
        if self.errors.is_empty() {
            Ok(self.config)
        } else {
            Err(ConfigErrors(self.errors))
        }
    }

    /// One document of a YAML stream that did not parse as a whole; errors
    /// give lines of the whole stream.
    fn yaml_document(&mut self, text: &str, first_line: usize, location: &str) {
        match serde_saphyr::from_str_with_options::<Value>(text, input::yaml_options()) {
            Ok(value) => self.document(value, location),
            Err(e) => {
                let message = input::yaml_error(&e);
                let shifted = e.location().and_then(|at| {
                    let suffix = format!("at line {}, column {}", at.line(), at.column());
                    let line = at.line() + first_line as u64 - 1;
                    message
                        .strip_suffix(&suffix)
                        .map(|head| format!("{head}at line {line}, column {}", at.column()))
                });
                let detail = shifted.unwrap_or_else(|| {
                    format!("{message} (in the document starting at line {first_line})")
                });
                self.parse_error(ObjectRef::document(location), "", detail);
            }
        }
    }

    fn parse_error(&mut self, object: ObjectRef, field: &str, detail: String) {
        self.errors.push(ConfigError {
            object,
            field: field.to_string(),
            error_type: ErrorType::Parse,
            value: None,
            detail,
        });
    }

    fn document(&mut self, value: Value, location: &str) {
        match value {
            // An empty document, such as the one after a trailing `---`.
            Value::Null => {}
            Value::Object(map) if is_list(&map) => self.list(map, location),
            Value::Object(map) => self.object(
                map,
                location.to_string(),
                &Inherited {
                    api_version: None,
                    kind: None,
                },
            ),
            other => self.parse_error(
                ObjectRef::document(location),
                "",
                format!(
                    "expected a FlowSchema, a PriorityLevelConfiguration or a List of them, found {}",
                    type_name(&other)
                ),
            ),
        }
    }

    fn list(&mut self, mut map: Map<String, Value>, location: &str) {
        let list_kind = str_field(&map, "kind").unwrap_or_default().to_string();
        let list_version = str_field(&map, "apiVersion").map(str::to_string);
        // `FlowSchemaList` items, as the API server returns them, carry no
        // kind of their own.
        let item_kind = list_kind.strip_suffix("List").filter(|k| !k.is_empty());
        let inherited = Inherited {
            api_version: list_version.as_deref(),
            kind: item_kind,
        };
        match map.remove("items") {
            None | Some(Value::Null) => {}
            Some(Value::Array(items)) => {
                for (i, item) in items.into_iter().enumerate() {
                    let item_location = format!("{location}, items[{i}]");
                    match item {
                        Value::Object(obj) => self.object(obj, item_location, &inherited),
                        other => self.parse_error(
                            ObjectRef::document(item_location),
                            "",
                            format!("expected an object, found {}", type_name(&other)),
                        ),
                    }
                }
            }
            Some(other) => self.parse_error(
                ObjectRef::document(location),
                "items",
                format!("expected an array, found {}", type_name(&other)),
            ),
        }
    }

    fn object(&mut self, map: Map<String, Value>, location: String, inherited: &Inherited<'_>) {
        let kind = str_field(&map, "kind")
            .or(inherited.kind)
            .unwrap_or_default()
            .to_string();
        let name = map
            .get("metadata")
            .and_then(|m| m.get("name"))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let object = ObjectRef {
            kind: if kind.is_empty() {
                "Document".to_string()
            } else {
                kind.clone()
            },
            name,
            location,
        };
        let api_version = str_field(&map, "apiVersion").or(inherited.api_version);
        let version = match api_version {
            Some(API_VERSION_V1) => SourceVersion::V1,
            Some(API_VERSION_V1BETA3) => SourceVersion::V1beta3,
            other => {
                self.errors.push(ConfigError {
                    object,
                    field: "apiVersion".into(),
                    error_type: ErrorType::NotSupported,
                    value: Some(format!("{:?}", other.unwrap_or_default())),
                    detail: format!(
                        "supported values: {API_VERSION_V1:?}, {API_VERSION_V1BETA3:?}"
                    ),
                });
                return;
            }
        };
        match kind.as_str() {
            KIND_FLOW_SCHEMA => {
                if let Some(mut fs) = self.decode::<FlowSchema>(map, &object) {
                    default_flow_schema(&mut fs);
                    self.config.flow_schemas.push(fs);
                }
            }
            KIND_PRIORITY_LEVEL => {
                if let Some(mut pl) = self.decode::<PriorityLevelConfiguration>(map, &object) {
                    default_priority_level(&mut pl, version);
                    self.config.priority_levels.push(pl);
                }
            }
            _ => self.errors.push(ConfigError {
                object,
                field: "kind".into(),
                error_type: ErrorType::NotSupported,
                value: Some(format!("{kind:?}")),
                detail: format!("supported values: {KIND_FLOW_SCHEMA:?}, {KIND_PRIORITY_LEVEL:?}"),
            }),
        }
    }

    fn decode<T: serde::de::DeserializeOwned>(
        &mut self,
        map: Map<String, Value>,
        object: &ObjectRef,
    ) -> Option<T> {
        match serde_path_to_error::deserialize::<_, T>(Value::Object(map)) {
            Ok(t) => Some(t),
            Err(e) => {
                let field = e.path().to_string();
                let field = if field == "." { String::new() } else { field };
                self.parse_error(object.clone(), &field, e.into_inner().to_string());
                None
            }
        }
    }
}

fn is_list(map: &Map<String, Value>) -> bool {
    str_field(map, "kind").is_some_and(|k| k.ends_with("List"))
}

fn str_field<'a>(map: &'a Map<String, Value>, key: &str) -> Option<&'a str> {
    map.get(key).and_then(Value::as_str)
}

fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}
