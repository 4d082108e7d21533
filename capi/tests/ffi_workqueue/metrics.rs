//! The metrics text, with client-go's names.

use super::*;

#[test]
fn metrics_text_has_client_go_names() {
    let mut o = options(apf_workqueue_kind::APF_WORKQUEUE_FIFO, true);
    let name = "controller-x";
    o.name = name.as_ptr().cast();
    o.name_len = name.len();
    let q = Q::with(&o);
    q.add("a");
    q.add("b");
    let a = q.try_get().unwrap();
    q.advance(2 * SECOND);
    q.add_after("c", MS);
    let text = q.metrics();
    for series in [
        "workqueue_depth{name=\"controller-x\"} 1",
        "workqueue_adds_total{name=\"controller-x\"} 2",
        "workqueue_retries_total{name=\"controller-x\"} 1",
        "workqueue_queue_duration_seconds_bucket",
        "workqueue_unfinished_work_seconds{name=\"controller-x\"} 2",
        "workqueue_longest_running_processor_seconds{name=\"controller-x\"} 2",
    ] {
        assert!(text.contains(series), "{series} missing from:\n{text}");
    }
    assert!(text.ends_with("# EOF\n"), "{text}");
    assert!(
        !text.contains("workqueue_work_duration_seconds"),
        "no observation yet"
    );
    q.done(a.handle);
    let text = q.metrics();
    assert!(
        text.contains(
            "workqueue_work_duration_seconds_bucket{le=\"10.0\",name=\"controller-x\"} 1"
        ),
        "{text}"
    );
    assert!(text.contains("workqueue_unfinished_work_seconds{name=\"controller-x\"} 0"));
    // Unnamed: no series, as in client-go.
    let unnamed = Q::new(apf_workqueue_kind::APF_WORKQUEUE_FIFO);
    unnamed.add("a");
    assert!(!unnamed.metrics().contains("workqueue_"));
    // Invalid UTF-8 in a name.
    let bad = [0xffu8, 0xfe];
    o.name = bad.as_ptr().cast();
    o.name_len = bad.len();
    let mut p = null_mut();
    // SAFETY: readable; writable.
    assert_eq!(
        unsafe { apf_workqueue_new(&o, &mut p, err()) },
        apf_status::APF_ERR_INVALID_UTF8
    );
}
