package apfwatch

import (
	"testing"

	flowcontrol "k8s.io/api/flowcontrol/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// condition is the Dangling condition stored on the fake cluster's schema.
func (h *harness) condition(name string) *flowcontrol.FlowSchemaCondition {
	h.t.Helper()
	s, err := h.client.FlowcontrolV1().FlowSchemas().Get(h.ctx, name, metav1.GetOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	return danglingCondition(s)
}

func (h *harness) hasCondition(name string, status flowcontrol.ConditionStatus, reason string) bool {
	c := h.condition(name)
	return c != nil && c.Status == status && c.Reason == reason
}

// TestStatusWriteBackDangling: with a status client, each schema's
// Dangling condition follows whether its priority level exists, written
// once per change (the watcher's own write does not make it write again).
func TestStatusWriteBackDangling(t *testing.T) {
	h := start(t, true, level("pl-a", 4, 2), schema("fs-a", "alice", "pl-a"), schema("fs-x", "xavier", "pl-later"))
	h.await("the initial conditions", func(r Result) bool {
		return r.Err == nil && r.StatusErr == nil &&
			h.hasCondition("fs-a", flowcontrol.ConditionFalse, "Found") &&
			h.hasCondition("fs-x", flowcontrol.ConditionTrue, "NotFound")
	})
	c := h.condition("fs-x")
	want := `This FlowSchema references the PriorityLevelConfiguration object named "pl-later" but there is no such object`
	if c.Message != want {
		t.Errorf("fs-x's message %q, want %q", c.Message, want)
	}
	if !c.LastTransitionTime.Time.Equal(h.clk.Now()) {
		t.Errorf("fs-x's transition time %v, want the watcher's clock %v", c.LastTransitionTime, h.clk.Now())
	}
	// The writes come back as updates; applying them writes nothing more.
	h.await("a quiet apply after the writes", func(r Result) bool { return r.StatusWrites == 0 && r.StatusErr == nil })

	if _, err := h.client.FlowcontrolV1().PriorityLevelConfigurations().Create(h.ctx, level("pl-later", 4, 2), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.await("fs-x found", func(r Result) bool {
		return r.StatusErr == nil && h.hasCondition("fs-x", flowcontrol.ConditionFalse, "Found")
	})
	if c := h.condition("fs-a"); c == nil || c.Reason != "Found" {
		t.Errorf("fs-a's condition changed: %+v", c)
	}
	if got := h.schemaOf("xavier"); got != "fs-x" {
		t.Errorf("xavier in %q once pl-later exists, want fs-x", got)
	}
}

// TestStatusWriteBackOffByDefault: without a status client nothing is
// written to the cluster.
func TestStatusWriteBackOffByDefault(t *testing.T) {
	h := start(t, false, level("pl-a", 4, 2), schema("fs-a", "alice", "pl-a"), schema("fs-x", "xavier", "pl-later"))
	h.await("the initial objects", h.classifies("alice", "fs-a"))
	for _, name := range []string{"fs-a", "fs-x"} {
		if c := h.condition(name); c != nil {
			t.Errorf("%s got a condition with the write-back off: %+v", name, c)
		}
	}
	for _, a := range h.client.Actions() {
		if v := a.GetVerb(); v != "get" && v != "list" && v != "watch" {
			t.Errorf("the watcher wrote to the cluster with the write-back off: %s %s", v, a.GetResource().Resource)
		}
	}
}
