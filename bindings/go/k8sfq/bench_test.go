package k8sfq

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	flowcontrol "k8s.io/api/flowcontrol/v1"
	fq "k8s.io/apiserver/pkg/util/flowcontrol/fairqueuing"
	"k8s.io/apiserver/pkg/util/flowcontrol/metrics"
	fcrequest "k8s.io/apiserver/pkg/util/flowcontrol/request"
)

// BenchmarkControllerHandle: Kubernetes' APF controller's Handle path
// (classification, then the priority level's queueset) with the stock
// queueset factory and with libapf's. Run by run-compare-k8sfq.sh.
//
//   - uncontended: one goroutine, seats to spare (test-pl has 1000);
//   - parallel: RunParallel, one flow per goroutine, seats to spare;
//   - saturated: 16 goroutines per core on 1 seat, 64 queues: most
//     requests wait in a queue. rejected/op counts queue-full rejections.
func BenchmarkControllerHandle(b *testing.B) {
	for _, f := range factories {
		b.Run("uncontended/"+f.name, func(b *testing.B) {
			s := startController(b, f.make(), 6000, testObjects(64, 8, 50))
			d := alice("get")
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				s.ctl.Handle(context.Background(), d, noNote, oneSeat, nil, func() {})
			}
		})
		b.Run("parallel/"+f.name, func(b *testing.B) {
			s := startController(b, f.make(), 6000, testObjects(64, 8, 50))
			benchParallel(b, s, 1)
		})
		b.Run("saturated/"+f.name, func(b *testing.B) {
			s := startController(b, f.make(), 6, testObjects(64, 8, 50))
			benchParallel(b, s, 16)
		})
	}
}

func benchParallel(b *testing.B, s *apfServer, parallelism int) {
	var next, rejected atomic.Int64
	b.SetParallelism(parallelism)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		d := aliceIn("get", fmt.Sprintf("ns-%d", next.Add(1)))
		for pb.Next() {
			ran := false
			s.ctl.Handle(context.Background(), d, func(*flowcontrol.FlowSchema, *flowcontrol.PriorityLevelConfiguration, string) {},
				oneSeat, nil, func() { ran = true })
			if !ran {
				rejected.Add(1)
			}
		}
	})
	b.ReportMetric(float64(rejected.Load())/float64(b.N), "rejected/op")
}

// BenchmarkQueueSetStartFinish: one priority level's queueset alone (no
// controller), a request admitted at once and finished, the stock
// queueset against libapf's: what the factory itself costs a request, in
// time and allocations.
func BenchmarkQueueSetStartFinish(b *testing.B) {
	for _, f := range factories {
		b.Run(f.name, func(b *testing.B) {
			registerMetrics.Do(metrics.Register)
			pair := metrics.RatioedGaugePair{RequestsWaiting: noopRatioed{}, RequestsExecuting: noopRatioed{}}
			c, err := f.make().BeginConstruction(fq.QueuingConfig{Name: "bench-" + f.name, DesiredNumQueues: 64, QueueLengthLimit: 50, HandSize: 8},
				pair, noopRatioed{}, noopRatioed{})
			if err != nil {
				b.Fatal(err)
			}
			qs := c.Complete(fq.DispatchingConfig{ConcurrencyLimit: 1000, ConcurrencyDenominator: 1000})
			est := fcrequest.WorkEstimate{InitialSeats: 1}
			ctx := context.Background()
			note := func(bool) {}
			b.ReportAllocs()
			for b.Loop() {
				r, _ := qs.StartRequest(ctx, &est, 42, "", "fs", nil, nil, note)
				if r == nil {
					b.Fatal("rejected")
				}
				r.Finish(func() {})
			}
		})
	}
}
