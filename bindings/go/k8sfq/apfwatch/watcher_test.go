package apfwatch

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	apf "github.com/libapf/apf/bindings/go"
	flowcontrol "k8s.io/api/flowcontrol/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"
)

// The longest a test waits for the watcher before it fails (a real-time
// bound so that a bug fails the test instead of hanging it; nothing is
// timed against it).
const patience = 2 * time.Minute

const debounce = time.Second

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

// armingClock is a fake clock that tells the test each time the watcher
// arms its debounce timer, so that the test steps the clock exactly then
// (no polling, no sleeping).
type armingClock struct {
	*clocktesting.FakeClock
	armed chan struct{}
}

func (c *armingClock) NewTimer(d time.Duration) clock.Timer {
	t := c.FakeClock.NewTimer(d)
	c.armed <- struct{}{}
	return t
}

// countingTarget counts the dispatcher's reconfigurations.
type countingTarget struct {
	d     *apf.Dispatcher
	calls chan struct{}
}

func (c *countingTarget) Reconfigure(config []byte) error {
	c.calls <- struct{}{}
	return c.d.Reconfigure(config)
}

type harness struct {
	t       *testing.T
	ctx     context.Context
	client  *fake.Clientset
	factory informers.SharedInformerFactory
	d       *apf.Dispatcher
	target  *countingTarget
	clk     *armingClock
	results chan Result
	w       *Watcher
}

// start runs a watcher on a fake clientset holding objects, a manual-clock
// dispatcher and a fake debounce clock; writeBack turns the status
// write-back on.
func start(t *testing.T, writeBack bool, objects ...runtime.Object) *harness {
	t.Helper()
	d, err := apf.NewBuiltin(apf.Options{ManualClock: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	h := &harness{
		t: t, ctx: ctx, client: fake.NewClientset(objects...), d: d,
		target:  &countingTarget{d: d, calls: make(chan struct{}, 1000)},
		clk:     &armingClock{FakeClock: clocktesting.NewFakeClock(time.Unix(1000, 0)), armed: make(chan struct{}, 1000)},
		results: make(chan Result, 1000),
	}
	h.factory = informers.NewSharedInformerFactory(h.client, 0)
	opts := Options{Debounce: debounce, Clock: h.clk, OnApplied: func(r Result) { h.results <- r }}
	if writeBack {
		opts.StatusClient = h.client.FlowcontrolV1()
	}
	h.w, err = New(h.target, h.factory, opts)
	if err != nil {
		t.Fatal(err)
	}
	h.factory.Start(ctx.Done())
	done := make(chan error, 1)
	go func() { done <- h.w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(patience):
			t.Error("Run did not return after its context ended")
		}
		h.factory.Shutdown()
		_ = d.Close()
	})
	return h
}

// await steps the fake clock past the debounce whenever the watcher arms
// it, until an apply's result satisfies ok.
func (h *harness) await(what string, ok func(Result) bool) Result {
	h.t.Helper()
	deadline := time.After(patience)
	for {
		select {
		case <-h.clk.armed:
			h.clk.Step(debounce)
		case r := <-h.results:
			if ok(r) {
				return r
			}
		case <-deadline:
			h.t.Fatalf("the watcher never got to: %s (last error %v)", what, h.w.LastError())
		}
	}
}

// armed waits until the watcher arms its debounce timer, without
// stepping the clock: changes made until the test steps it form one burst.
func (h *harness) armed() {
	h.t.Helper()
	select {
	case <-h.clk.armed:
	case <-time.After(patience):
		h.t.Fatal("the watcher never armed its debounce timer")
	}
}

// cached waits until inf's cache holds an object for which match is true:
// a handler of the test's own hears it, as the informer delivers events
// after storing them (and replays its cache to a new handler).
func (h *harness) cached(inf cache.SharedIndexInformer, what string, match func(obj any) bool) {
	h.t.Helper()
	seen := make(chan struct{})
	var once sync.Once
	check := func(obj any) {
		if match(obj) {
			once.Do(func() { close(seen) })
		}
	}
	reg, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    check,
		UpdateFunc: func(_, obj any) { check(obj) },
	})
	if err != nil {
		h.t.Fatal(err)
	}
	defer func() { _ = inf.RemoveEventHandler(reg) }()
	select {
	case <-seen:
	case <-time.After(patience):
		h.t.Fatalf("%s never reached the informer's cache", what)
	}
}

func (h *harness) schemaCached(name string) {
	h.t.Helper()
	h.cached(h.factory.Flowcontrol().V1().FlowSchemas().Informer(), name, func(obj any) bool {
		s, ok := obj.(*flowcontrol.FlowSchema)
		return ok && s.Name == name
	})
}

// schemaOf is the flow schema the dispatcher classifies user's request into.
func (h *harness) schemaOf(userName string) string {
	h.t.Helper()
	res, err := h.d.Handle(context.Background(), apf.RequestDigest{User: userName, Verb: "get", Path: "/healthz"}, nil, nil, nil, func() {})
	if err != nil {
		h.t.Fatal(err)
	}
	return res.FlowSchema
}

func (h *harness) classifies(userName, fs string) func(Result) bool {
	return func(r Result) bool { return r.Err == nil && h.schemaOf(userName) == fs }
}

func TestWatcherFollowsAddsUpdatesDeletesAndKeepsLastGood(t *testing.T) {
	h := start(t, false, level("pl-a", 4, 2), schema("fs-a", "alice", "pl-a"))
	fc := h.client.FlowcontrolV1()

	// The first apply follows the caches' sync without a debounce.
	h.await("the initial objects", h.classifies("alice", "fs-a"))

	if _, err := fc.FlowSchemas().Create(h.ctx, schema("fs-b", "bob", "pl-a"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.await("the added fs-b", h.classifies("bob", "fs-b"))

	if _, err := fc.FlowSchemas().Update(h.ctx, schema("fs-b", "carol", "pl-a"), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.await("the updated fs-b", func(r Result) bool {
		return r.Err == nil && h.schemaOf("carol") == "fs-b" && h.schemaOf("bob") != "fs-b"
	})

	if err := fc.FlowSchemas().Delete(h.ctx, "fs-b", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	h.await("the deleted fs-b", func(r Result) bool { return r.Err == nil && h.schemaOf("carol") != "fs-b" })

	// An invalid priority level (hand larger than the queues) together
	// with a valid new schema: the whole change is refused, the last good
	// configuration stays, and the watcher says why.
	if _, err := fc.FlowSchemas().Create(h.ctx, schema("fs-d", "dave", "pl-a"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.armed()
	if _, err := fc.PriorityLevelConfigurations().Update(h.ctx, level("pl-a", 4, 9), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.cached(h.factory.Flowcontrol().V1().PriorityLevelConfigurations().Informer(), "pl-a's update", func(obj any) bool {
		l, ok := obj.(*flowcontrol.PriorityLevelConfiguration)
		return ok && l.Name == "pl-a" && l.Spec.Limited.LimitResponse.Queuing.HandSize == 9
	})
	h.clk.Step(debounce)
	r := h.await("the refusal of pl-a's hand size", func(r Result) bool { return r.Err != nil })
	if r.FlowSchemas != 2 || r.PriorityLevels != 1 {
		t.Errorf("the refused apply counted %d schemas and %d levels, want 2 and 1", r.FlowSchemas, r.PriorityLevels)
	}
	if h.w.LastError() == nil {
		t.Error("LastError lost the refusal")
	}
	if got := h.schemaOf("alice"); got != "fs-a" {
		t.Errorf("alice after the refused change: %q, want the last good fs-a", got)
	}
	if got := h.schemaOf("dave"); got == "fs-d" {
		t.Error("dave's fs-d came in with the refused change")
	}

	// Fixing the level applies everything.
	if _, err := fc.PriorityLevelConfigurations().Update(h.ctx, level("pl-a", 4, 3), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.await("the repaired pl-a", h.classifies("dave", "fs-d"))
	if err := h.w.LastError(); err != nil {
		t.Errorf("LastError after a good apply: %v", err)
	}
}

// TestWatcherDebounceGathersABurst: a change arms the timer; changes made
// before it fires are applied with the first, in one reconfiguration.
func TestWatcherDebounceGathersABurst(t *testing.T) {
	h := start(t, false, level("pl-a", 4, 2), schema("fs-a", "alice", "pl-a"))
	fc := h.client.FlowcontrolV1()
	h.await("the initial objects", h.classifies("alice", "fs-a"))
	<-h.target.calls

	if _, err := fc.FlowSchemas().Create(h.ctx, schema("fs-b", "bob", "pl-a"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.armed()
	// Just short of the debounce nothing fires: the timer still waits.
	h.clk.Step(debounce - time.Nanosecond)
	if !h.clk.HasWaiters() {
		t.Fatal("the debounce timer fired early")
	}
	// A second change inside the window, in the informer's cache before
	// the timer fires.
	if _, err := fc.FlowSchemas().Create(h.ctx, schema("fs-c", "carol", "pl-a"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.schemaCached("fs-c")
	h.clk.Step(time.Nanosecond)
	var r Result
	select {
	case r = <-h.results:
	case <-time.After(patience):
		t.Fatal("no apply after the debounce")
	}
	if r.Err != nil || r.FlowSchemas != 3 {
		t.Fatalf("the first apply after the burst: %+v, want both new schemas", r)
	}
	if h.schemaOf("bob") != "fs-b" || h.schemaOf("carol") != "fs-c" {
		t.Fatal("the burst was not applied whole")
	}
	if n := len(h.target.calls); n != 1 {
		t.Fatalf("%d reconfigurations for the burst, want 1", n)
	}
}

func TestNewRejectsBadArguments(t *testing.T) {
	factory := informers.NewSharedInformerFactory(fake.NewClientset(), 0)
	if _, err := New(nil, factory, Options{}); err == nil {
		t.Error("a nil target was accepted")
	}
	d, err := apf.NewBuiltin(apf.Options{ManualClock: true})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if _, err := New(d, nil, Options{}); err == nil {
		t.Error("a nil factory was accepted")
	}
	if _, err := New(d, factory, Options{Debounce: -time.Second}); err == nil || !strings.Contains(err.Error(), "Options.Debounce") {
		t.Errorf("a negative debounce: %v, want an error naming Options.Debounce", err)
	}
}
