package apf

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
)

// raceConfig is one level, "race", under the given fairness policy with the
// given number of queues (hand size 2 at most); every authenticated user is
// a flow of it.
func raceConfig(policy string, queues int) []byte {
	hand := queues
	if hand > 2 {
		hand = 2
	}
	return []byte(fmt.Sprintf(`
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: PriorityLevelConfiguration
metadata:
  name: race
  annotations: {apf.libapf.io/fairness: %s}
spec:
  type: Limited
  limited:
    nominalConcurrencyShares: 100
    lendablePercent: 0
    limitResponse: {type: Queue, queuing: {queues: %d, handSize: %d, queueLengthLimit: 50}}
---
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: FlowSchema
metadata: {name: race-schema}
spec:
  priorityLevelConfiguration: {name: race}
  matchingPrecedence: 100
  distinguisherMethod: {type: ByUser}
  rules:
  - subjects: [{kind: Group, group: {name: system:authenticated}}]
    resourceRules: [{verbs: ["*"], apiGroups: ["*"], resources: ["*"], namespaces: ["*"], clusterScope: true}]
`, policy, queues, hand))
}

// raceQueues is the "race" level's rows of the queue dump: each queue's
// seats in use, by index.
func raceQueues(t *testing.T, d *Dispatcher) []int64 {
	t.Helper()
	dump, err := d.DumpQueues()
	if err != nil {
		t.Fatal(err)
	}
	header, rows := tableOf(t, dump)
	seats := -1
	for i, h := range header {
		if h == "SeatsInUse" {
			seats = i
		}
	}
	if seats < 0 {
		t.Fatalf("no SeatsInUse column:\n%s", dump)
	}
	var out []int64
	for _, r := range rows {
		if r[0] != "race" {
			continue
		}
		n, err := strconv.ParseInt(r[seats], 10, 64)
		if err != nil {
			t.Fatalf("seats %q: %v", r[seats], err)
		}
		out = append(out, n)
	}
	return out
}

// Seats.Release from a goroutine while the handler returns, a use the Seats
// docs allow (a watch giving back its burst's seat as it ends): each release
// lands before the finish or finds the request finished, and afterwards the
// idle level has no seat on any of its queues; reconfigured to one queue, it
// lists one. Before issue 22's fix a release could reach the level after the
// finish and leave a phantom seat on a queue for good (and the level could
// not drop that queue). The window is a few instructions wide: the C ABI's
// capi/tests/ffi_release.rs and the loom model in src/level/shared.rs
// reproduce it on the old code; this test, which drives the Go API as a user
// does, did not in three runs against the old library on a 2-core machine.
// It checks that both orders end clean through every layer a Go user drives.
func testReleaseRacingReturn(t *testing.T, policy string) {
	// Eight pairs of a handler and a releasing goroutine, each waiting by
	// spinning: with more Ps than cores the kernel preempts them at any
	// instruction, as it does the threads of a busy server.
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(16))
	const pairs = 8
	const rounds = 300
	d, err := NewFromConfig(raceConfig(policy, 8), Options{ServerConcurrencyLimit: 200})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	twoSeats := func() WorkEstimate { return WorkEstimate{InitialSeats: 2} }
	var landed, late atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < pairs; g++ {
		// handed passes the running request's Seats to the releaser;
		// done tells the handler its release returned.
		var handed atomic.Pointer[Seats]
		var done atomic.Int64
		wg.Add(2)
		go func() {
			defer wg.Done()
			for i := 0; i < rounds; i++ {
				var s *Seats
				for s = handed.Load(); s == nil; s = handed.Load() {
					runtime.Gosched()
				}
				handed.Store(nil)
				spin(0)
				switch err := s.Release(1); {
				case err == nil:
					landed.Add(1)
				case errors.Is(err, StatusInvalidHandle):
					late.Add(1)
				default:
					t.Errorf("release: %v", err)
				}
				done.Store(int64(i + 1))
			}
		}()
		go func(g int) {
			defer wg.Done()
			digest := podGet("u" + strconv.Itoa(g))
			digest.Verb = "watch"
			for i := 0; i < rounds; i++ {
				res, err := d.HandleReleasable(context.Background(), digest, nil, twoSeats, nil,
					func(s *Seats) {
						handed.Store(s)
						// The release races the return below: both sides
						// spin by varying amounts, so either may come first.
						spin(i % 200 * 30)
					})
				for done.Load() != int64(i+1) {
					runtime.Gosched()
				}
				if err != nil || res.Outcome != Executed {
					t.Errorf("round %d: %+v %v", i, res, err)
					return
				}
			}
		}(g)
	}
	wg.Wait()
	if landed.Load()+late.Load() != int64(pairs*rounds) {
		t.Fatalf("releases: %d landed + %d late, want %d", landed.Load(), late.Load(), int64(pairs*rounds))
	}
	if got := levelStat(t, d, "race", "seats_in_use"); got != 0 {
		t.Fatalf("seats in use on the idle level: %d", got)
	}
	queues := raceQueues(t, d)
	if len(queues) != 8 {
		t.Fatalf("queues %v, want 8", queues)
	}
	for i, seats := range queues {
		if seats != 0 {
			t.Fatalf("queue %d of the idle level holds %d seats (all: %v; %d releases landed, %d late)",
				i, seats, queues, landed.Load(), late.Load())
		}
	}
	if err := d.Reconfigure(raceConfig(policy, 1)); err != nil {
		t.Fatal(err)
	}
	if queues := raceQueues(t, d); len(queues) != 1 || queues[0] != 0 {
		t.Fatalf("after reconfiguring to one queue: %v", queues)
	}
	t.Logf("%s: %d releases landed before the finish, %d after", policy, landed.Load(), late.Load())
}

func TestSeatsReleaseRacingReturnUnderFlow(t *testing.T) {
	testReleaseRacingReturn(t, "flow")
}

func TestSeatsReleaseRacingReturnUnderFlowMaxmin(t *testing.T) {
	testReleaseRacingReturn(t, "flow-maxmin")
}

// spinSink keeps spin's loop from being optimised away.
var spinSink atomic.Int64

// spin busy-waits about n steps, shifting where a racing call lands.
func spin(n int) {
	x := int64(0)
	for i := 0; i < n; i++ {
		x += int64(i) ^ x
	}
	spinSink.Store(x)
}
