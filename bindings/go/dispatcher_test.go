package apf

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestBadConfigIsATypedError(t *testing.T) {
	_, err := NewFromConfig([]byte("kind: PriorityLevelConfiguration\nspec: [not, a, spec]\n"), Options{})
	var e *Error
	if !errors.As(err, &e) || !errors.Is(err, StatusConfig) || e.Message == "" {
		t.Fatalf("got %#v", err)
	}
	if !strings.Contains(err.Error(), "apf: ") {
		t.Fatalf("message %q", err.Error())
	}
}

func TestInvalidOptionsAreRefused(t *testing.T) {
	_, err := NewBuiltin(Options{ServerConcurrencyLimit: 1 << 31})
	if !errors.Is(err, StatusInvalidParameter) {
		t.Fatalf("got %v", err)
	}
}

func TestReconfigureErrorKeepsOldConfig(t *testing.T) {
	d := newTestDispatcher(t, Options{})
	if err := d.Reconfigure([]byte("{not yaml: [")); !errors.Is(err, StatusConfig) {
		t.Fatalf("got %v", err)
	}
	if err := d.Reconfigure([]byte{0xff, 0xfe}); !errors.Is(err, StatusInvalidUTF8) {
		t.Fatalf("got %v", err)
	}
	res, err := d.Handle(context.Background(), podGet("alice"), nil, nil, nil, func() {})
	if err != nil || res.PriorityLevel != "tight" {
		t.Fatalf("%+v %v", res, err)
	}
	// A valid reconfiguration takes effect: alice's schema now points at
	// strict.
	moved := strings.Replace(testConfig, "priorityLevelConfiguration: {name: tight}\n  matchingPrecedence: 100",
		"priorityLevelConfiguration: {name: strict}\n  matchingPrecedence: 100", 1)
	if err := d.Reconfigure([]byte(moved)); err != nil {
		t.Fatal(err)
	}
	res, err = d.Handle(context.Background(), podGet("alice"), nil, nil, nil, func() {})
	if err != nil || res.PriorityLevel != "strict" || res.PriorityLevelUID != "uid-pl-strict" {
		t.Fatalf("%+v %v", res, err)
	}
}

func TestInvalidUTF8InDigest(t *testing.T) {
	d := newTestDispatcher(t, Options{})
	dg := podGet("alice")
	dg.Namespace = "\xff"
	ran := false
	_, err := d.Handle(context.Background(), dg, nil, nil, nil, func() { ran = true })
	if ran || !errors.Is(err, StatusInvalidUTF8) {
		t.Fatalf("ran %v, %v", ran, err)
	}
	dg = podGet("alice")
	dg.Groups = []string{"ok", "\xc3"}
	if _, err := d.Handle(context.Background(), dg, nil, nil, nil, func() {}); !errors.Is(err, StatusInvalidUTF8) {
		t.Fatalf("bad group: %v", err)
	}
}

func TestManualClockOnly(t *testing.T) {
	d := newTestDispatcher(t, Options{})
	if err := d.AdvanceClock(time.Second); !errors.Is(err, StatusNotManualClock) {
		t.Fatalf("got %v", err)
	}
	if err := d.AdvanceClock(-time.Second); !errors.Is(err, StatusInvalidParameter) {
		t.Fatalf("got %v", err)
	}
	m := newTestDispatcher(t, Options{ManualClock: true})
	if now, err := m.Now(); err != nil || now != 0 {
		t.Fatalf("%v %v", now, err)
	}
}

func TestStaleHandleIsAnError(t *testing.T) {
	d := newTestDispatcher(t, Options{})
	var dec decision
	dg := podGet("alice")
	if err := d.startC(&dg, WorkEstimate{InitialSeats: 1}, &dec); err != nil {
		t.Fatal(err)
	}
	h := dec.handle()
	if err := d.finishC(h); err != nil {
		t.Fatal(err)
	}
	if err := d.finishC(h); !errors.Is(err, StatusInvalidHandle) {
		t.Fatalf("second finish: %v", err)
	}
	if _, err := d.cancelC(h); !errors.Is(err, StatusInvalidHandle) {
		t.Fatalf("cancel of a finished request: %v", err)
	}
}

func TestStatusText(t *testing.T) {
	if s := StatusInvalidHandle.Error(); !strings.Contains(s, "handle") {
		t.Fatalf("%q", s)
	}
	if s := Status(1).Error(); !strings.Contains(s, "1") {
		t.Fatalf("%q", s)
	}
}

func TestVersionMatches(t *testing.T) {
	if err := checkVersion(); err != nil {
		t.Fatal(err)
	}
	if headerVersion() != libraryVersion() {
		t.Fatalf("header %#x, library %#x", headerVersion(), libraryVersion())
	}
}

// A Dispatcher dropped without Close is freed by its finalizer: the
// completion goroutine (which holds only the shared core) must not keep it
// reachable.
func TestFinalizerFreesUnreachableDispatcher(t *testing.T) {
	var c *core
	func() {
		d, err := NewBuiltin(Options{})
		if err != nil {
			t.Fatal(err)
		}
		c = d.c
	}()
	deadline := time.Now().Add(10 * time.Second)
	for !c.use.freed() {
		if time.Now().After(deadline) {
			t.Fatal("the finalizer never closed the dispatcher")
		}
		runtime.GC()
		time.Sleep(time.Millisecond)
	}
	select {
	case <-c.loopDone:
	case <-time.After(10 * time.Second):
		t.Fatal("the completion goroutine did not stop")
	}
}

// Kept alive by runtime.KeepAlive during every call: a dispatcher used
// only inside Handle is not finalized under it, even with GC forced.
func TestNoFinalizationDuringCalls(t *testing.T) {
	var ran atomic.Int32
	for i := 0; i < 20; i++ {
		d, err := NewBuiltin(Options{})
		if err != nil {
			t.Fatal(err)
		}
		_, err = d.Handle(context.Background(), podGet("alice"), nil, nil, nil, func() {
			runtime.GC()
			runtime.GC()
			ran.Add(1)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if ran.Load() != 20 {
		t.Fatalf("ran %d", ran.Load())
	}
}

// A Close racing a call in flight must not free the C dispatcher under it
// (the Workqueue's counting scheme, now the Dispatcher's too): the call
// held here stands for one inside libapf when Close runs.
func TestCloseWaitsForCallsInsideLibapf(t *testing.T) {
	d := newTestDispatcher(t, Options{ManualClock: true})
	if _, ok := d.c.enter(); !ok {
		t.Fatal("a fresh dispatcher refused a call")
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if d.c.use.freed() {
		t.Fatal("Close freed the dispatcher under a call")
	}
	if _, err := d.Now(); !errors.Is(err, ErrClosed) {
		t.Fatalf("a call after Close: %v, want ErrClosed", err)
	}
	d.c.exit()
	if !d.c.use.freed() {
		t.Fatal("the last call's exit did not free the closed dispatcher")
	}
}

// Many goroutines call while another closes: every call either works or
// gets ErrClosed, and the race detector sees no unsynchronised access.
func TestCloseRacingCalls(t *testing.T) {
	d := newTestDispatcher(t, Options{ManualClock: true})
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 200; j++ {
				if _, err := d.MetricsText(); err != nil && !errors.Is(err, ErrClosed) {
					t.Errorf("MetricsText: %v", err)
					return
				}
			}
		}()
	}
	_ = d.Close()
	wg.Wait()
	if !d.c.use.freed() {
		t.Fatal("not freed after the last call")
	}
}
