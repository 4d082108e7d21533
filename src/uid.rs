//! Stable UIDs for configuration objects that have none.
//!
//! Kubernetes sends an object's UID, not its name, in the
//! `X-Kubernetes-PF-FlowSchema-UID` / `X-Kubernetes-PF-PriorityLevel-UID`
//! response headers, so that the names an administrator chose stay
//! private. Objects stored in a cluster always have a UID; libapf's
//! built-in objects, and objects in a file without `metadata.uid`, do not.
//! They get one derived from their kind and name: a UUID version 5 under a
//! fixed libapf namespace, so the same object has the same UID in every
//! process, every run and every language binding (a client can recognise
//! it). A `metadata.uid` from the configuration always wins.

use uuid::Uuid;

/// The namespace of derived UIDs (a random UUID chosen once for libapf;
/// changing it would change every derived UID).
pub const UID_NAMESPACE: Uuid = Uuid::from_u128(0x93fb90bd_9350_4111_b02f_bb4ecfa2f617);

/// The derived UID of the flow schema `name`.
pub fn flow_schema_uid(name: &str) -> String {
    derived("flowschemas", name)
}

/// The derived UID of the priority level configuration `name`.
pub fn priority_level_uid(name: &str) -> String {
    derived("prioritylevelconfigurations", name)
}

/// The kind is part of the hashed name: a flow schema and a priority level
/// of the same name (`exempt`, `catch-all`) are different objects, with
/// different UIDs, as in a cluster.
fn derived(resource: &str, name: &str) -> String {
    let key = format!("flowcontrol.apiserver.k8s.io/{resource}/{name}");
    Uuid::new_v5(&UID_NAMESPACE, key.as_bytes())
        .hyphenated()
        .to_string()
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn uids_are_version_5_stable_and_differ_by_kind() {
        let fs = flow_schema_uid("exempt");
        let pl = priority_level_uid("exempt");
        assert_ne!(fs, pl);
        assert_eq!(fs, flow_schema_uid("exempt"));
        let parsed = Uuid::parse_str(&fs).expect("a UUID");
        assert_eq!(parsed.get_version_num(), 5);
        assert_ne!(flow_schema_uid("a"), flow_schema_uid("b"));
    }
}
