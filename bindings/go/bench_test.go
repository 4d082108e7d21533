package apf

import (
	"context"
	"testing"
)

func noop() {}

// The execute path allocates nothing in Go once the names are cached.
func TestHandleExecuteDoesNotAllocate(t *testing.T) {
	d := newTestDispatcher(t, Options{ServerConcurrencyLimit: 500})
	dg := podGet("alice")
	ctx := context.Background()
	allocs := testing.AllocsPerRun(1000, func() {
		if _, err := d.Handle(ctx, dg, nil, nil, nil, noop); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per Handle", allocs)
	}
}

func BenchmarkHandleUncontended(b *testing.B) {
	d, err := NewBuiltin(Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	dg := podGet("alice")
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := d.Handle(ctx, dg, nil, nil, nil, noop); err != nil {
			b.Fatal(err)
		}
	}
}
