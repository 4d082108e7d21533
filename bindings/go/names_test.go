package apf

import (
	"context"
	"errors"
	"strings"
	"testing"
)

func classify(t *testing.T, d *Dispatcher, user string) Classification {
	t.Helper()
	res, err := d.Handle(context.Background(), podGet(user), nil, nil, nil, func() {})
	if err != nil || res.Outcome != Executed {
		t.Fatalf("%s: %+v %v", user, res, err)
	}
	return res.Classification
}

// The names behind libapf's ids: right for every schema and level, right
// again after a reconfiguration renames a level (the cache keeps the old
// id's names and learns the new id's), and separate per dispatcher (ids
// of two dispatchers may share an index).
func TestClassificationNamesByID(t *testing.T) {
	d := newTestDispatcher(t, Options{})
	want := map[string]Classification{
		"alice": {"alice", "uid-fs-alice", "tight", "uid-pl-tight"},
		"bob":   {"bob", "uid-fs-bob", "strict", "uid-pl-strict"},
	}
	for round := 0; round < 2; round++ { // the second round hits the cache
		for user, w := range want {
			if got := classify(t, d, user); got != w {
				t.Fatalf("round %d %s: got %+v, want %+v", round, user, got, w)
			}
		}
	}
	carol := classify(t, d, "carol")
	if carol.FlowSchema != "catch-all" || carol.PriorityLevel != "catch-all" || carol.FlowSchemaUID == "" {
		t.Fatalf("carol: %+v", carol)
	}
	renamed := strings.ReplaceAll(testConfig, "tight", "snug")
	if err := d.Reconfigure([]byte(renamed)); err != nil {
		t.Fatal(err)
	}
	if got := classify(t, d, "alice"); got.PriorityLevel != "snug" || got.PriorityLevelUID != "uid-pl-snug" ||
		got.FlowSchema != "alice" {
		t.Fatalf("after the rename: %+v", got)
	}
	if got := classify(t, d, "bob"); got != want["bob"] {
		t.Fatalf("bob after the rename: %+v", got)
	}
	// Another dispatcher whose first ids name other objects.
	other, err := NewFromConfig([]byte(strings.ReplaceAll(testConfig, "alice", "zed")), Options{ServerConcurrencyLimit: 5})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if got := classify(t, other, "zed"); got.FlowSchema != "zed" || got.FlowSchemaUID != "uid-fs-zed" {
		t.Fatalf("other dispatcher: %+v", got)
	}
	if got := classify(t, d, "alice"); got.FlowSchema != "alice" {
		t.Fatalf("first dispatcher after the other: %+v", got)
	}
}

// A made-up id is refused by libapf, and the cache answers only for ids
// it was given.
func TestNamesCacheRefusesUnknownIDs(t *testing.T) {
	d := newTestDispatcher(t, Options{})
	for _, id := range []uint32{0, 1, 1<<nameIndexBits | 1<<nameIndexBits - 1} {
		if _, _, err := d.nameC(id); !errors.Is(err, StatusInvalidParameter) {
			t.Fatalf("id %#x: %v", id, err)
		}
		if _, err := d.c.names.get(id, d.nameC); err == nil {
			t.Fatalf("id %#x: the cache answered", id)
		}
	}
	var n names
	fetched := 0
	fetch := func(id uint32) (string, string, error) { fetched++; return "n", "u", nil }
	const a, b = 7<<nameIndexBits | 3, 9<<nameIndexBits | 3 // same index, other salt
	for i := 0; i < 3; i++ {
		if v, err := n.get(a, fetch); err != nil || v.name != "n" {
			t.Fatal(v, err)
		}
	}
	if fetched != 1 {
		t.Fatalf("fetched %d times", fetched)
	}
	if _, ok := n.lookup(b); ok {
		t.Fatal("an id with another salt hit the cache")
	}
}

// A request started but not handled (Handle could not read its names) is
// given back: an executing one frees its seat, a queued one its place.
func TestAbandonStartedGivesBackSeatAndQueuePlace(t *testing.T) {
	d := newTestDispatcher(t, Options{})
	digest := podGet("alice")
	start := func(want uint32) *decision {
		t.Helper()
		var dec decision
		if err := d.startC(&digest, WorkEstimate{InitialSeats: 1}, &dec); err != nil {
			t.Fatal(err)
		}
		if dec.outcomeCode() != want {
			t.Fatalf("outcome %d, want %d", dec.outcomeCode(), want)
		}
		return &dec
	}
	executing := start(outcomeExecute)
	if got := levelStat(t, d, "tight", "executing"); got != 1 {
		t.Fatalf("executing %d", got)
	}
	d.abandonStarted(executing)
	if got := levelStat(t, d, "tight", "executing"); got != 0 {
		t.Fatalf("executing %d after abandoning", got)
	}
	h := hold(t, d, "alice", levelSeats)
	queued := start(outcomeQueued)
	if got := levelStat(t, d, "tight", "waiting"); got != 1 {
		t.Fatalf("waiting %d", got)
	}
	d.abandonStarted(queued)
	if got := levelStat(t, d, "tight", "waiting"); got != 0 {
		t.Fatalf("waiting %d after abandoning", got)
	}
	h.stop(t)
}
