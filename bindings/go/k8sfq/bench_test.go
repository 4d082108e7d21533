package k8sfq

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	flowcontrol "k8s.io/api/flowcontrol/v1"
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
