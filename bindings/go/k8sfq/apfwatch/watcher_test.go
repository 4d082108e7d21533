package apfwatch

import (
	"context"
	"testing"
	"time"

	apf "github.com/libapf/apf-go"
	flowcontrol "k8s.io/api/flowcontrol/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"
)

func level(name string, queues, hand int32) *flowcontrol.PriorityLevelConfiguration {
	shares := int32(10)
	return &flowcontrol.PriorityLevelConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: flowcontrol.PriorityLevelConfigurationSpec{
			Type: flowcontrol.PriorityLevelEnablementLimited,
			Limited: &flowcontrol.LimitedPriorityLevelConfiguration{
				NominalConcurrencyShares: &shares,
				LimitResponse: flowcontrol.LimitResponse{
					Type:    flowcontrol.LimitResponseTypeQueue,
					Queuing: &flowcontrol.QueuingConfiguration{Queues: queues, HandSize: hand, QueueLengthLimit: 10},
				},
			},
		},
	}
}

func schema(name, userName, pl string) *flowcontrol.FlowSchema {
	return &flowcontrol.FlowSchema{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: flowcontrol.FlowSchemaSpec{
			PriorityLevelConfiguration: flowcontrol.PriorityLevelConfigurationReference{Name: pl},
			MatchingPrecedence:         100,
			Rules: []flowcontrol.PolicyRulesWithSubjects{{
				Subjects:         []flowcontrol.Subject{{Kind: flowcontrol.SubjectKindUser, User: &flowcontrol.UserSubject{Name: userName}}},
				NonResourceRules: []flowcontrol.NonResourcePolicyRule{{Verbs: []string{"*"}, NonResourceURLs: []string{"*"}}},
			}},
		},
	}
}

// schemaOf is the flow schema the dispatcher classifies user's request into.
func schemaOf(t *testing.T, d *apf.Dispatcher, userName string) string {
	t.Helper()
	res, err := d.Handle(context.Background(), apf.RequestDigest{User: userName, Verb: "get", Path: "/healthz"}, nil, nil, nil, func() {})
	if err != nil {
		t.Fatal(err)
	}
	return res.FlowSchema
}

// TestWatcherFollowsAddsUpdatesDeletesAndKeepsLastGood drives the watcher
// through client-go's fake clientset and informers; the debounce runs on
// a fake clock, stepped once the watcher has armed it.
func TestWatcherFollowsAddsUpdatesDeletesAndKeepsLastGood(t *testing.T) {
	ctx := context.Background()
	client := fake.NewClientset(level("pl-a", 4, 2), schema("fs-a", "alice", "pl-a"))
	factory := informers.NewSharedInformerFactory(client, 0)
	d, err := apf.NewBuiltin(apf.Options{ManualClock: true})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	clk := clocktesting.NewFakeClock(time.Unix(0, 0))
	applied := make(chan error, 16)
	w, err := New(d, factory, Options{Debounce: time.Second, Clock: clk, OnApplied: func(err error) { applied <- err }})
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	defer close(stop)
	factory.Start(stop)
	factory.WaitForCacheSync(stop)

	// settle steps the fake clock past the debounce once the watcher has
	// armed it (after the informers delivered the change) and returns what
	// applying gave.
	settle := func() error {
		t.Helper()
		err := wait.PollUntilContextTimeout(ctx, time.Millisecond, 30*time.Second, true,
			func(context.Context) (bool, error) { return clk.HasWaiters(), nil })
		if err != nil {
			t.Fatal("the watcher never armed its debounce timer")
		}
		clk.Step(time.Second)
		return <-applied
	}

	if err := settle(); err != nil { // the initial adds
		t.Fatal(err)
	}
	if got := schemaOf(t, d, "alice"); got != "fs-a" {
		t.Fatalf("alice: %q", got)
	}

	fc := client.FlowcontrolV1()
	if _, err := fc.FlowSchemas().Create(ctx, schema("fs-b", "bob", "pl-a"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := settle(); err != nil {
		t.Fatal(err)
	}
	if got := schemaOf(t, d, "bob"); got != "fs-b" {
		t.Fatalf("bob after the add: %q", got)
	}

	if _, err := fc.FlowSchemas().Update(ctx, schema("fs-b", "carol", "pl-a"), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := settle(); err != nil {
		t.Fatal(err)
	}
	if bob, carol := schemaOf(t, d, "bob"), schemaOf(t, d, "carol"); bob == "fs-b" || carol != "fs-b" {
		t.Fatalf("after the update: bob %q, carol %q", bob, carol)
	}

	if err := fc.FlowSchemas().Delete(ctx, "fs-b", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := settle(); err != nil {
		t.Fatal(err)
	}
	if got := schemaOf(t, d, "carol"); got == "fs-b" {
		t.Fatal("carol still in the deleted fs-b")
	}

	// Invalid: a hand larger than the queues. The last good configuration
	// stays in force.
	if _, err := fc.PriorityLevelConfigurations().Update(ctx, level("pl-a", 4, 9), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := settle(); err == nil {
		t.Fatal("an invalid priority level was applied")
	}
	if w.LastError() == nil {
		t.Fatal("LastError lost the refusal")
	}
	if got := schemaOf(t, d, "alice"); got != "fs-a" {
		t.Fatalf("alice after the refused update: %q", got)
	}
}
