//! Limits for reading untrusted text (configurations and workloads), shared
//! by every reader so that YAML and JSON, files and the C ABI, all refuse the
//! same hostile input in the same way:
//!
//! - a size cap ([`MAX_INPUT_BYTES`]), checked before parsing (and by
//!   [`read_file`] while reading, so `/dev/zero` fails at once);
//! - one node budget ([`MAX_INPUT_NODES`]) for YAML and JSON alike;
//! - errors quote at most a few hundred bytes of what they echo
//!   ([`clip`]), so a 50 MB name does not make a 100 MB message.

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};
use std::borrow::Cow;
use std::cell::Cell;
use std::fmt;
use std::io::Read;
use std::path::Path;

/// The largest configuration or workload accepted, in bytes. The API server
/// takes request bodies of up to 3 MB and etcd objects of 1.5 MB; a whole
/// cluster's flow-control objects with managed fields are far below this.
pub const MAX_INPUT_BYTES: usize = 16 << 20;

/// The most nodes (scalars, sequences, mappings) a YAML or JSON input may
/// hold. A flow-control configuration has hundreds, a cluster's worth with
/// managed fields tens of thousands.
pub const MAX_INPUT_NODES: usize = 200_000;

/// The most alias replays a YAML input may cause (alias bombs fail fast).
const MAX_ALIAS_EVENTS: usize = 100_000;

/// The message for input over [`MAX_INPUT_BYTES`] (`len` when known).
pub fn too_large(len: Option<usize>) -> String {
    let size = len.map_or(String::new(), |n| format!("{n} bytes, "));
    format!(
        "input too large: {size}over the limit of {} MiB (MAX_INPUT_BYTES)",
        MAX_INPUT_BYTES >> 20
    )
}

/// Reads a file of at most [`MAX_INPUT_BYTES`]; stops reading past the cap
/// (a device such as `/dev/zero` or a growing file fails promptly). The
/// error names the path.
pub fn read_file(path: &Path) -> Result<Vec<u8>, String> {
    let file = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    read_capped(file, &path.display().to_string())
}

/// Reads standard input as [`read_file`] reads a file (the error says
/// `standard input`).
pub fn read_stdin() -> Result<Vec<u8>, String> {
    read_capped(std::io::stdin().lock(), "standard input")
}

fn read_capped(reader: impl Read, name: &str) -> Result<Vec<u8>, String> {
    let mut bytes = Vec::new();
    reader
        .take(MAX_INPUT_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("{name}: {e}"))?;
    if bytes.len() > MAX_INPUT_BYTES {
        return Err(format!("{name}: {}", too_large(None)));
    }
    Ok(bytes)
}

/// `text` itself when short, otherwise its first `max` bytes (cut at a
/// character boundary) and how long it was.
pub fn clip(text: &str, max: usize) -> Cow<'_, str> {
    if text.len() <= max {
        return Cow::Borrowed(text);
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    Cow::Owned(format!("{}… ({} bytes in all)", &text[..end], text.len()))
}

/// The YAML reader's options for configurations and workloads: YAML 1.2
/// scalars (`n`, `no`, `on` and `0755` stay strings: a service account named
/// `n` is not `false`) and the shared budget.
pub(crate) fn yaml_options() -> serde_saphyr::Options {
    let mut options = serde_saphyr::Options::default();
    options.with_snippet = false;
    options.strict_booleans = true;
    options.leading_zero_numbers_as_strings = true;
    options.underscored_numbers_as_strings = true;
    options.alias_limits.max_total_replayed_events = MAX_ALIAS_EVENTS;
    if let Some(budget) = options.budget.as_mut() {
        budget.max_nodes = MAX_INPUT_NODES;
    }
    options
}

/// A YAML reader's error as text, the node budget's breach worded as the
/// JSON reader words it (the parser prints its internal name for it).
pub(crate) fn yaml_error(e: &serde_saphyr::Error) -> String {
    let text = e.to_string();
    match text.strip_prefix("budget breached: Nodes") {
        Some(rest) => {
            let at = rest.find(" at line").map_or("", |i| &rest[i..]);
            format!("more than {MAX_INPUT_NODES} nodes (MAX_INPUT_NODES){at}")
        }
        None => text,
    }
}

/// The JSON values of `text`, one after another, with [`MAX_INPUT_NODES`]
/// counted over all of them as they are built (so a huge array fails before
/// it is in memory). Stops after the first error: a JSON stream cannot
/// resynchronise.
pub(crate) fn json_values(text: &str) -> Vec<Result<Value, serde_json::Error>> {
    let nodes = Cell::new(0usize);
    let mut de = serde_json::Deserializer::from_str(text);
    let mut out = Vec::new();
    loop {
        // `end` succeeds only at the end of the input (whitespace aside).
        if de.end().is_ok() {
            break;
        }
        let value = Counted { nodes: &nodes }.deserialize(&mut de);
        let failed = value.is_err();
        out.push(value);
        if failed {
            break;
        }
    }
    out
}

/// Builds a [`Value`] while counting its nodes against the budget.
#[derive(Clone, Copy)]
struct Counted<'a> {
    nodes: &'a Cell<usize>,
}

impl Counted<'_> {
    fn count<E: de::Error>(self) -> Result<(), E> {
        let n = self.nodes.get() + 1;
        if n > MAX_INPUT_NODES {
            return Err(E::custom(format!(
                "more than {MAX_INPUT_NODES} nodes (MAX_INPUT_NODES)"
            )));
        }
        self.nodes.set(n);
        Ok(())
    }
}

impl<'de> DeserializeSeed<'de> for Counted<'_> {
    type Value = Value;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Counted<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Value, E> {
        self.count()?;
        Ok(Value::Bool(v))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Value, E> {
        self.count()?;
        Ok(Value::from(v))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Value, E> {
        self.count()?;
        Ok(Value::from(v))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        self.count()?;
        Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Value, E> {
        self.count()?;
        Ok(Value::String(v.to_string()))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<Value, E> {
        self.count()?;
        Ok(Value::String(v))
    }
    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        self.count()?;
        Ok(Value::Null)
    }
    fn visit_none<E: de::Error>(self) -> Result<Value, E> {
        self.visit_unit()
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        self.deserialize(d)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        self.count()?;
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(self)? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        self.count()?;
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let value = map.next_value_seed(self)?;
            out.insert(key, value);
        }
        Ok(Value::Object(out))
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn clip_keeps_short_text_and_cuts_long_text_at_a_char_boundary() {
        assert_eq!(clip("abc", 3), "abc");
        let long = "é".repeat(100); // 200 bytes
        let clipped = clip(&long, 11);
        assert!(clipped.starts_with(&"é".repeat(5)), "{clipped}");
        assert!(clipped.ends_with("… (200 bytes in all)"), "{clipped}");
    }

    #[test]
    fn json_budget_counts_over_the_whole_stream() {
        let half = format!("[{}0]", "0,".repeat(MAX_INPUT_NODES / 2));
        // One array of half the budget is fine ...
        let one = json_values(&half);
        assert_eq!(one.len(), 1);
        assert!(one[0].is_ok());
        // ... two of them one after another are not.
        let two = json_values(&format!("{half}\n{half}"));
        assert_eq!(two.len(), 2);
        let e = two[1].as_ref().unwrap_err().to_string();
        assert!(e.contains("MAX_INPUT_NODES"), "{e}");
    }

    #[test]
    fn json_values_read_a_stream_and_stop_at_a_syntax_error() {
        let v = json_values(" {\"a\": [1, 2.5, null, true]} {\"b\": \"x\"} ");
        assert_eq!(v.len(), 2);
        assert_eq!(
            v[0].as_ref().unwrap(),
            &serde_json::json!({"a": [1, 2.5, null, true]})
        );
        let v = json_values("{} {oops} {}");
        assert_eq!(v.len(), 2);
        assert!(v[1].is_err());
        assert!(json_values("  \n").is_empty());
    }

    #[test]
    fn read_file_stops_at_the_cap() {
        let e = read_file(Path::new("/dev/zero")).unwrap_err();
        assert!(e.contains("/dev/zero") && e.contains("16 MiB"), "{e}");
        let e = read_file(Path::new("/nonexistent/x.yaml")).unwrap_err();
        assert!(e.starts_with("/nonexistent/x.yaml: "), "{e}");
    }
}
