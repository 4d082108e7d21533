package apf

import (
	"bufio"
	"context"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// testConfig has two small levels besides the mandatory ones. With a
// server limit of 5 seats and shares 10 + 10 + 5 (catch-all) + 0 (exempt),
// each gets ceil(5*10/25) = 2 seats and lends none:
//   - "tight" queues (one queue, so every waiter is in the same FIFO);
//   - "strict" rejects when full.
//
// User alice lands in tight, bob in strict, members of group team-z in
// tight too (by a schema matching the group); everyone else in catch-all.
const testConfig = `
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: PriorityLevelConfiguration
metadata: {name: tight, uid: uid-pl-tight}
spec:
  type: Limited
  limited:
    nominalConcurrencyShares: 10
    lendablePercent: 0
    limitResponse: {type: Queue, queuing: {queues: 1, handSize: 1, queueLengthLimit: 1000}}
---
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: PriorityLevelConfiguration
metadata: {name: strict, uid: uid-pl-strict}
spec:
  type: Limited
  limited:
    nominalConcurrencyShares: 10
    lendablePercent: 0
    limitResponse: {type: Reject}
---
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: FlowSchema
metadata: {name: alice, uid: uid-fs-alice}
spec:
  priorityLevelConfiguration: {name: tight}
  matchingPrecedence: 100
  distinguisherMethod: {type: ByUser}
  rules:
  - subjects: [{kind: User, user: {name: alice}}]
    resourceRules: [{verbs: ["*"], apiGroups: ["*"], resources: ["*"], namespaces: ["*"], clusterScope: true}]
    nonResourceRules: [{verbs: ["*"], nonResourceURLs: ["*"]}]
---
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: FlowSchema
metadata: {name: bob, uid: uid-fs-bob}
spec:
  priorityLevelConfiguration: {name: strict}
  matchingPrecedence: 200
  rules:
  - subjects: [{kind: User, user: {name: bob}}]
    resourceRules: [{verbs: ["*"], apiGroups: ["*"], resources: ["*"], namespaces: ["*"], clusterScope: true}]
    nonResourceRules: [{verbs: ["*"], nonResourceURLs: ["*"]}]
---
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: FlowSchema
metadata: {name: team-z, uid: uid-fs-team-z}
spec:
  priorityLevelConfiguration: {name: tight}
  matchingPrecedence: 300
  rules:
  - subjects: [{kind: Group, group: {name: team-z}}]
    resourceRules: [{verbs: ["*"], apiGroups: ["*"], resources: ["*"], namespaces: ["*"], clusterScope: true}]
`

const levelSeats = 2

func newTestDispatcher(t testing.TB, opts Options) *Dispatcher {
	t.Helper()
	if opts.ServerConcurrencyLimit == 0 {
		opts.ServerConcurrencyLimit = 5
	}
	d, err := NewFromConfig([]byte(testConfig), opts)
	if err != nil {
		t.Fatalf("NewFromConfig: %v", err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return d
}

func podGet(user string) RequestDigest {
	return RequestDigest{
		User:              user,
		Groups:            []string{"system:authenticated"},
		IsResourceRequest: true,
		Verb:              "get",
		Resource:          "pods",
		Namespace:         "default",
		Name:              "web-0",
		Path:              "/api/v1/namespaces/default/pods/web-0",
	}
}

// levelStats is one level's line of StatsText.
type levelStats map[string]int64

func stats(t testing.TB, d *Dispatcher) (global levelStats, levels map[string]levelStats) {
	t.Helper()
	text, err := d.StatsText()
	if err != nil {
		t.Fatalf("StatsText: %v", err)
	}
	levels = map[string]levelStats{}
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		m := levelStats{}
		start := 0
		if len(f) >= 2 && f[0] == "level" {
			start = 2
		}
		for i := start; i+1 < len(f); i += 2 {
			if v, err := strconv.ParseInt(f[i+1], 10, 64); err == nil {
				m[f[i]] = v
			}
		}
		if start == 2 {
			levels[f[1]] = m
		} else {
			global = m
		}
	}
	return global, levels
}

func levelStat(t testing.TB, d *Dispatcher, level, key string) int64 {
	t.Helper()
	_, levels := stats(t, d)
	l, ok := levels[level]
	if !ok {
		t.Fatalf("no level %q in stats", level)
	}
	v, ok := l[key]
	if !ok {
		t.Fatalf("no %q for level %q in stats %v", key, level, l)
	}
	return v
}

// eventually polls cond (without sleeping on a fixed schedule longer than
// a millisecond) until it holds or the deadline passes.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for: %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// holder occupies seats of a level with requests that execute until
// released.
type holder struct {
	release chan struct{}
	done    chan Result
}

func hold(t testing.TB, d *Dispatcher, user string, n int) *holder {
	t.Helper()
	h := &holder{release: make(chan struct{}), done: make(chan Result, n)}
	var running atomic.Int32
	for i := 0; i < n; i++ {
		go func() {
			res, err := d.Handle(context.Background(), podGet(user), nil, nil, nil, func() {
				running.Add(1)
				<-h.release
			})
			if err != nil {
				// Reported by stop (a failed test may have closed d).
				res.Outcome = 0
			}
			h.done <- res
		}()
	}
	eventually(t, "holders executing", func() bool { return running.Load() == int32(n) })
	return h
}

func (h *holder) stop(t testing.TB) {
	t.Helper()
	close(h.release)
	for i := 0; i < cap(h.done); i++ {
		if res := <-h.done; res.Outcome != Executed {
			t.Errorf("holder: %+v", res)
		}
	}
}
