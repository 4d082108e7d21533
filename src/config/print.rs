//! Printing a configuration as the `v1` `List` that `kubectl get -o yaml`
//! prints and `kubectl apply -f` accepts.

use serde::Serialize;

use super::types::*;
use super::Config;

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct List<'a> {
    api_version: &'static str,
    kind: &'static str,
    items: Vec<Item<'a>>,
}

#[derive(Serialize)]
#[serde(untagged)]
enum Item<'a> {
    PriorityLevel(Typed<'a, PriorityLevelConfigurationSpec>),
    FlowSchema(Typed<'a, FlowSchemaSpec>),
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Typed<'a, S> {
    api_version: &'static str,
    kind: &'static str,
    metadata: &'a ObjectMeta,
    spec: &'a S,
}

fn list(config: &Config) -> List<'_> {
    let levels = config.priority_levels.iter().map(|pl| {
        Item::PriorityLevel(Typed {
            api_version: API_VERSION_V1,
            kind: KIND_PRIORITY_LEVEL,
            metadata: &pl.metadata,
            spec: &pl.spec,
        })
    });
    let schemas = config.flow_schemas.iter().map(|fs| {
        Item::FlowSchema(Typed {
            api_version: API_VERSION_V1,
            kind: KIND_FLOW_SCHEMA,
            metadata: &fs.metadata,
            spec: &fs.spec,
        })
    });
    List {
        api_version: "v1",
        kind: "List",
        items: levels.chain(schemas).collect(),
    }
}

/// These types serialize to plain maps with string keys, which neither
/// serializer can refuse; should one ever fail, the output carries the
/// error where a reader (or a reload) will see it rather than panicking.
pub(crate) fn to_yaml(config: &Config) -> String {
    serde_saphyr::to_string(&list(config)).unwrap_or_else(|e| format!("# print error: {e}\n"))
}

pub(crate) fn to_json(config: &Config) -> String {
    serde_json::to_string_pretty(&list(config))
        .unwrap_or_else(|e| format!("{{\"printError\": {:?}}}", e.to_string()))
}
