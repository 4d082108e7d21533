//go:build debug

package apf

import (
	"context"
	"testing"
)

// An uncontended Handle crosses into C exactly twice: one call starts the
// request (classification, decision, ids) and one finishes it; the names
// come from the binding's cache after the first request.
func TestHandleMakesOneCCallPerStartAndFinish(t *testing.T) {
	d := newTestDispatcher(t, Options{})
	ctx := context.Background()
	handle := func() {
		if res, err := d.Handle(ctx, podGet("alice"), nil, nil, nil, func() {}); err != nil || res.Outcome != Executed {
			t.Fatalf("%+v %v", res, err)
		}
	}
	handle() // learns the names: two more C calls, once
	const n = 5
	before := cCalls.Load()
	for i := 0; i < n; i++ {
		handle()
	}
	if got := cCalls.Load() - before; got != 2*n {
		t.Fatalf("%d requests made %d C calls, want %d", n, got, 2*n)
	}
}
