//! A strict OpenMetrics text parser for the tests that read an exposition
//! back (`tests/metrics/`, `capi/tests/ffi/observe.rs`): every rule of the
//! text format the exporter relies on is checked, and the error names the
//! offending line.
//!
//! Included with `#[path]` by each test crate; not every crate uses every
//! helper.
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};

#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

#[derive(Debug, Clone)]
pub struct Family {
    pub kind: String,
    pub help: String,
    pub samples: Vec<Sample>,
}

#[derive(Debug, Default)]
pub struct Exposition {
    pub families: BTreeMap<String, Family>,
}

pub fn valid_name(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

/// The suffixes a sample of a family of `kind` may add to the family name.
pub fn suffixes(kind: &str) -> &'static [&'static str] {
    match kind {
        "counter" => &["_total", "_created"],
        "gauge" => &[""],
        "histogram" => &["_bucket", "_count", "_sum", "_created"],
        _ => &[],
    }
}

pub fn parse_labels(text: &str) -> Result<(BTreeMap<String, String>, &str), String> {
    let mut labels = BTreeMap::new();
    let mut rest = text.strip_prefix('{').ok_or("labels must start with {")?;
    loop {
        if let Some(after) = rest.strip_prefix('}') {
            return Ok((labels, after));
        }
        let eq = rest.find('=').ok_or("label without =")?;
        let key = &rest[..eq];
        if !valid_name(key) || key.contains(':') {
            return Err(format!("bad label name {key:?}"));
        }
        rest = rest[eq + 1..]
            .strip_prefix('"')
            .ok_or("label value must be quoted")?;
        let mut value = String::new();
        let mut chars = rest.char_indices();
        let end = loop {
            match chars.next() {
                None => return Err("unterminated label value".into()),
                Some((i, '"')) => break i,
                Some((_, '\\')) => match chars.next() {
                    Some((_, 'n')) => value.push('\n'),
                    Some((_, '\\')) => value.push('\\'),
                    Some((_, '"')) => value.push('"'),
                    other => return Err(format!("bad escape {other:?}")),
                },
                Some((_, c)) => value.push(c),
            }
        };
        if labels.insert(key.to_string(), value).is_some() {
            return Err(format!("label {key} twice"));
        }
        rest = &rest[end + 1..];
        if let Some(after) = rest.strip_prefix(',') {
            rest = after;
        } else if !rest.starts_with('}') {
            return Err("labels must be separated by commas".into());
        }
    }
}

pub fn parse_value(s: &str) -> Result<f64, String> {
    match s {
        "+Inf" => Ok(f64::INFINITY),
        "-Inf" => Ok(f64::NEG_INFINITY),
        "NaN" => Ok(f64::NAN),
        _ => s
            .parse::<f64>()
            .map_err(|e| format!("bad value {s:?}: {e}")),
    }
}

macro_rules! ensure {
    ($cond:expr, $($fmt:tt)+) => {
        let holds: bool = $cond;
        if !holds {
            return Err(format!($($fmt)+));
        }
    };
}

/// Parse the exposition; panics with the first rule it breaks.
pub fn parse(text: &str) -> Exposition {
    try_parse(text).unwrap_or_else(|e| panic!("{e}"))
}

/// Parse the exposition, checking every rule of the OpenMetrics text format
/// the exporter relies on; the error names the offending line.
pub fn try_parse(text: &str) -> Result<Exposition, String> {
    let mut exp = Exposition::default();
    let mut current: Option<String> = None;
    let mut eof = false;
    let mut seen = BTreeSet::new();
    ensure!(
        text.ends_with(
            "# EOF
"
        ),
        "exposition must end with # EOF"
    );
    for line in text.lines() {
        ensure!(!eof, "line after # EOF: {line}");
        if line == "# EOF" {
            eof = true;
            continue;
        }
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').ok_or(format!("bad HELP: {line}"))?;
            ensure!(valid_name(name), "bad family name {name}");
            ensure!(
                !exp.families.contains_key(name),
                "family {name} declared twice"
            );
            exp.families.insert(
                name.to_string(),
                Family {
                    kind: String::new(),
                    help: help.to_string(),
                    samples: Vec::new(),
                },
            );
            current = Some(name.to_string());
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').ok_or(format!("bad TYPE: {line}"))?;
            ensure!(
                Some(name) == current.as_deref(),
                "TYPE must follow its HELP"
            );
            ensure!(
                ["counter", "gauge", "histogram"].contains(&kind),
                "unexpected type {kind}"
            );
            exp.families.get_mut(name).ok_or("TYPE without HELP")?.kind = kind.to_string();
            continue;
        }
        ensure!(!line.starts_with('#'), "unexpected comment {line}");
        let family_name = current
            .clone()
            .ok_or(format!("sample before any family: {line}"))?;
        let family = exp
            .families
            .get_mut(&family_name)
            .ok_or("undeclared family")?;
        ensure!(!family.kind.is_empty(), "sample before TYPE: {line}");
        let name_end = line
            .find(['{', ' '])
            .ok_or(format!("sample without value: {line}"))?;
        let name = &line[..name_end];
        let suffix = name
            .strip_prefix(family_name.as_str())
            .ok_or(format!("sample {name} outside family {family_name}"))?;
        ensure!(
            suffixes(&family.kind).contains(&suffix),
            "sample {name} has no valid suffix for a {}",
            family.kind
        );
        let (labels, rest) = if line[name_end..].starts_with('{') {
            parse_labels(&line[name_end..]).map_err(|e| format!("{e}: {line}"))?
        } else {
            (BTreeMap::new(), &line[name_end..])
        };
        let value = rest
            .strip_prefix(' ')
            .ok_or(format!("one space before the value: {line}"))?;
        ensure!(!value.contains(' '), "no timestamps or exemplars: {line}");
        let value = parse_value(value).map_err(|e| format!("{e}: {line}"))?;
        ensure!(
            seen.insert((name.to_string(), labels.clone())),
            "duplicate series {line}"
        );
        family.samples.push(Sample {
            name: name.to_string(),
            labels,
            value,
        });
    }
    ensure!(eof, "no # EOF");
    for (name, family) in &exp.families {
        ensure!(!family.samples.is_empty(), "family {name} without samples");
        if family.kind == "histogram" {
            check_histograms(name, family)?;
        }
        if family.kind == "counter" {
            for s in &family.samples {
                ensure!(s.value >= 0.0, "negative counter {s:?}");
            }
        }
    }
    Ok(exp)
}

/// Buckets cumulative and ordered, `+Inf` last and equal to `_count`.
pub fn check_histograms(name: &str, family: &Family) -> Result<(), String> {
    let mut by_series: BTreeMap<BTreeMap<String, String>, Vec<(f64, f64)>> = BTreeMap::new();
    let mut counts = BTreeMap::new();
    for s in &family.samples {
        if s.name.ends_with("_bucket") {
            let mut key = s.labels.clone();
            let le = key
                .remove("le")
                .ok_or(format!("{name}: bucket without le"))?;
            by_series
                .entry(key)
                .or_default()
                .push((parse_value(&le)?, s.value));
        } else if s.name.ends_with("_count") {
            counts.insert(s.labels.clone(), s.value);
        }
    }
    ensure!(
        by_series.len() == counts.len(),
        "{name}: buckets and counts"
    );
    for (labels, buckets) in by_series {
        for pair in buckets.windows(2) {
            ensure!(pair[0].0 < pair[1].0, "{name}: le in order");
            ensure!(pair[0].1 <= pair[1].1, "{name}: buckets cumulative");
        }
        let last = buckets.last().ok_or(format!("{name}: no buckets"))?;
        ensure!(last.0 == f64::INFINITY, "{name}: +Inf bucket last");
        ensure!(
            Some(&last.1) == counts.get(&labels),
            "{name}: +Inf == count"
        );
    }
    Ok(())
}

impl Exposition {
    pub fn series(&self) -> usize {
        self.families.values().map(|f| f.samples.len()).sum()
    }

    /// The value of the sample `name` whose labels include `labels`;
    /// panics unless exactly one matches.
    pub fn get(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        let found: Vec<&Sample> = self
            .families
            .values()
            .flat_map(|f| &f.samples)
            .filter(|s| {
                s.name == name
                    && labels
                        .iter()
                        .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
            })
            .collect();
        assert_eq!(found.len(), 1, "{name} {labels:?}: {found:?}");
        found[0].value
    }

    pub fn has(&self, name: &str, labels: &[(&str, &str)]) -> bool {
        self.families.values().flat_map(|f| &f.samples).any(|s| {
            s.name == name
                && labels
                    .iter()
                    .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
        })
    }

    /// Histogram `name` for `labels`: cumulative bucket counts by `le`.
    pub fn buckets(&self, name: &str, labels: &[(&str, &str)]) -> Vec<(String, f64)> {
        self.families[name]
            .samples
            .iter()
            .filter(|s| {
                s.name.ends_with("_bucket")
                    && labels
                        .iter()
                        .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
            })
            .map(|s| (s.labels["le"].clone(), s.value))
            .collect()
    }

    pub fn bucket(&self, name: &str, labels: &[(&str, &str)], le: &str) -> f64 {
        let b = self.buckets(name, labels);
        b.iter()
            .find(|(l, _)| parse_value(l).ok() == parse_value(le).ok())
            .unwrap_or_else(|| panic!("{name} {labels:?} has no le={le}: {b:?}"))
            .1
    }
}
