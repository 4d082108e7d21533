package k8scompare

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	apf "github.com/libapf/apf/bindings/go"
)

// The workloads run both sides on the same priority level: libapf with
// Kubernetes' built-in configuration, where an authenticated user's
// request lands in the global-default level (classification included in
// libapf's figure), and Kubernetes' queueset configured as the apiserver
// configures global-default (128 queues, hand size 6, queue length limit
// 50) with the concurrency limit libapf gave that level.

// levelShape is a limited priority level's queuing and dispatching
// parameters.
type levelShape struct {
	name             string
	concurrencyLimit int
	queues           int
	queueLengthLimit int
	handSize         int
}

func globalDefault(concurrencyLimit int) levelShape {
	return levelShape{"global-default", concurrencyLimit, 128, 50, 6}
}

// Server seats for the saturated workload, where global-default gets a
// handful of seats (5: libapf's borrowing allocation at start-up, read
// from its stats and given to Kubernetes' queueset too).
const (
	uncontendedServerSeats = 600
	saturatedServerSeats   = 40
	saturatedWorkers       = 64
)

// libapfSide is a dispatcher with the built-in configuration; borrowing is
// set far apart so no limit moves during a benchmark.
func libapfSide(tb testing.TB, serverSeats uint32) (*apf.Dispatcher, int) {
	tb.Helper()
	d, err := apf.NewBuiltin(apf.Options{ServerConcurrencyLimit: serverSeats, BorrowingPeriod: time.Hour})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = d.Close() })
	return d, levelLimit(tb, d, "global-default")
}

// levelLimit reads a level's concurrency limit from the stats text.
func levelLimit(tb testing.TB, d *apf.Dispatcher, level string) int {
	tb.Helper()
	text, err := d.StatsText()
	if err != nil {
		tb.Fatal(err)
	}
	for _, line := range strings.Split(text, "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || f[0] != "level" || f[1] != level {
			continue
		}
		for i := 2; i+1 < len(f); i += 2 {
			if f[i] == "concurrency_limit" {
				n, err := strconv.Atoi(f[i+1])
				if err != nil {
					tb.Fatal(err)
				}
				return n
			}
		}
	}
	tb.Fatalf("no level %q in %q", level, text)
	return 0
}

func userDigest(i int) apf.RequestDigest {
	return apf.RequestDigest{
		User:              fmt.Sprintf("bench-user-%d", i),
		Groups:            []string{"system:authenticated"},
		IsResourceRequest: true,
		Verb:              "get",
		Resource:          "pods",
		Namespace:         "default",
		Name:              "web-0",
		Path:              "/api/v1/namespaces/default/pods/web-0",
	}
}

// flowHash spreads Kubernetes' flows as distinct users would.
func flowHash(i int) uint64 { return uint64(i+1) * 0x9e3779b97f4a7c15 }

func noop() {}

// Uncontended: one goroutine, free seats, nothing queued: start + finish.
func BenchmarkUncontended(b *testing.B) {
	b.Run("libapf", func(b *testing.B) {
		d, _ := libapfSide(b, uncontendedServerSeats)
		digest := userDigest(0)
		ctx := context.Background()
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			res, err := d.Handle(ctx, digest, nil, nil, nil, noop)
			if err != nil || res.Outcome != apf.Executed || res.Queued {
				b.Fatalf("%+v %v", res, err)
			}
		}
	})
	b.Run("kubernetes", func(b *testing.B) {
		_, limit := libapfSide(b, uncontendedServerSeats)
		k := newKubeLevel(b, globalDefault(limit))
		ctx := context.Background()
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			queued, executed := k.handle(ctx, flowHash(0), noop)
			if queued || !executed {
				b.Fatalf("queued %v executed %v", queued, executed)
			}
		}
	})
}

// Parallel: GOMAXPROCS goroutines (one flow each) start and finish on the
// same level at once, with seats to spare.
func BenchmarkParallel(b *testing.B) {
	b.Run("libapf", func(b *testing.B) {
		d, _ := libapfSide(b, uncontendedServerSeats)
		var ids atomic.Int64
		b.ReportAllocs()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			digest := userDigest(int(ids.Add(1)))
			ctx := context.Background()
			for pb.Next() {
				if res, err := d.Handle(ctx, digest, nil, nil, nil, noop); err != nil || res.Outcome != apf.Executed {
					b.Errorf("%+v %v", res, err)
					return
				}
			}
		})
	})
	b.Run("kubernetes", func(b *testing.B) {
		_, limit := libapfSide(b, uncontendedServerSeats)
		k := newKubeLevel(b, globalDefault(limit))
		var ids atomic.Int64
		b.ReportAllocs()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			hash := flowHash(int(ids.Add(1)))
			ctx := context.Background()
			for pb.Next() {
				if _, executed := k.handle(ctx, hash, noop); !executed {
					b.Error("rejected")
					return
				}
			}
		})
	})
}

// Saturated: 64 goroutines, each its own flow, share a level of 5 seats.
// Each request yields the processor while it executes, so the others
// arrive to a full level and queue; every finish dispatches a waiting
// request, which wakes its goroutine. ns/op is wall time per request
// (the inverse of throughput); queued/op shows that requests really
// queued.
func BenchmarkSaturated(b *testing.B) {
	exec := func() { runtime.Gosched() }
	b.Run("libapf", func(b *testing.B) {
		d, limit := libapfSide(b, saturatedServerSeats)
		if limit > 8 {
			b.Fatalf("global-default has %d seats, want a handful", limit)
		}
		digests := make([]apf.RequestDigest, saturatedWorkers)
		for w := range digests {
			digests[w] = userDigest(w)
		}
		saturate(b, func(w int) (queued, executed bool) {
			res, err := d.Handle(context.Background(), digests[w], nil, nil, nil, exec)
			if err != nil {
				b.Error(err)
			}
			return res.Queued, res.Outcome == apf.Executed
		})
	})
	b.Run("kubernetes", func(b *testing.B) {
		_, limit := libapfSide(b, saturatedServerSeats)
		k := newKubeLevel(b, globalDefault(limit))
		saturate(b, func(w int) (queued, executed bool) {
			return k.handle(context.Background(), flowHash(w), exec)
		})
	})
}

// saturate runs b.N requests from saturatedWorkers goroutines through
// handle and reports the share that queued.
func saturate(b *testing.B, handle func(worker int) (queued, executed bool)) {
	var next, queued, rejected atomic.Int64
	var wg sync.WaitGroup
	b.ReportAllocs()
	b.ResetTimer()
	for w := 0; w < saturatedWorkers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for next.Add(1) <= int64(b.N) {
				q, executed := handle(w)
				if q {
					queued.Add(1)
				}
				if !executed {
					rejected.Add(1)
				}
			}
		}(w)
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(queued.Load())/float64(b.N), "queued/op")
	if rejected.Load() != 0 {
		b.Fatalf("%d of %d requests rejected", rejected.Load(), b.N)
	}
}

// The saturated workload must really queue on both sides, or it measures
// nothing of interest.
func TestSaturatedWorkloadQueues(t *testing.T) {
	d, limit := libapfSide(t, saturatedServerSeats)
	k := newKubeLevel(t, globalDefault(limit))
	for name, handle := range map[string]func(int) (bool, bool){
		"libapf": func(w int) (bool, bool) {
			res, err := d.Handle(context.Background(), userDigest(w), nil, nil, nil, runtime.Gosched)
			if err != nil {
				t.Error(err)
			}
			return res.Queued, res.Outcome == apf.Executed
		},
		"kubernetes": func(w int) (bool, bool) {
			return k.handle(context.Background(), flowHash(w), runtime.Gosched)
		},
	} {
		var queued, executed atomic.Int64
		var wg sync.WaitGroup
		for w := 0; w < saturatedWorkers; w++ {
			wg.Add(1)
			go func(w int) {
				defer wg.Done()
				for i := 0; i < 50; i++ {
					q, e := handle(w)
					if q {
						queued.Add(1)
					}
					if e {
						executed.Add(1)
					}
				}
			}(w)
		}
		wg.Wait()
		if executed.Load() != saturatedWorkers*50 || queued.Load() < saturatedWorkers*50/2 {
			t.Errorf("%s: executed %d, queued %d of %d", name, executed.Load(), queued.Load(), saturatedWorkers*50)
		}
	}
}
