// Package apfwatch keeps a libapf dispatcher's configuration in step with
// the FlowSchema and PriorityLevelConfiguration objects of a cluster,
// through client-go shared informers, and optionally writes the
// FlowSchemas' Dangling status condition back as Kubernetes' APF
// controller does.
//
// Every server of a fleet that watches the same cluster ends up with the
// same configuration, with no coordination of its own: as KEP-1040 says,
// each apiserver runs API Priority and Fairness independently on the
// objects it sees, and its limits are its own.
package apfwatch

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	apf "github.com/libapf/apf/bindings/go"
	flowcontrol "k8s.io/api/flowcontrol/v1"
	"k8s.io/client-go/informers"
	flowcontrolclient "k8s.io/client-go/kubernetes/typed/flowcontrol/v1"
	listers "k8s.io/client-go/listers/flowcontrol/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// DefaultDebounce is how long a burst of changes is gathered before the
// objects are applied, when Options.Debounce is zero.
const DefaultDebounce = 100 * time.Millisecond

// DefaultFieldManager names the status writer in server-side apply when
// Options.FieldManager is empty.
const DefaultFieldManager = "libapf-apf-config-consumer"

// Options tune a Watcher. The zero value is a watcher with a 100 ms
// debounce on the real clock that writes no status.
type Options struct {
	// Debounce: after a change, the watcher waits this long (gathering
	// further changes) before it applies the objects, once.
	Debounce time.Duration
	// Clock runs the debounce timer and stamps the conditions' transition
	// times (default: the real clock). Tests pass a fake clock and step it.
	Clock clock.Clock
	// OnApplied, if set, hears the outcome of every apply, on the
	// watcher's goroutine (it must not block for long).
	OnApplied func(Result)
	// StatusClient, if set, turns on the status write-back: each
	// FlowSchema's Dangling condition is kept up to date by server-side
	// apply of its status, as Kubernetes' APF controller does. Nil (the
	// default) writes nothing: in a cluster, kube-apiserver already
	// maintains these conditions.
	StatusClient flowcontrolclient.FlowSchemasGetter
	// FieldManager names the status writer (default DefaultFieldManager).
	FieldManager string
}

// Result is the outcome of one apply.
type Result struct {
	// Err is why the dispatcher refused the objects (it keeps the last
	// good configuration), or why they could not be listed; nil when the
	// objects are in force.
	Err error
	// Unchanged: the objects were the ones last put in force, so the
	// dispatcher was not reconfigured.
	Unchanged bool
	// FlowSchemas and PriorityLevels count the objects applied.
	FlowSchemas, PriorityLevels int
	// StatusWrites counts the conditions written back; StatusErr joins
	// the failures to write (the configuration is applied regardless).
	StatusWrites int
	StatusErr    error
}

// Reconfigurer is what a Watcher drives: *apf.Dispatcher.
type Reconfigurer interface {
	Reconfigure(config []byte) error
}

var _ Reconfigurer = (*apf.Dispatcher)(nil)

// Watcher reconfigures a dispatcher whenever the objects change.
//
// Informer event handlers only note that something changed (a
// non-blocking send on a one-slot channel); one goroutine (Run) waits for
// a note, waits out the debounce on the clock's timer channel, then lists
// the informers' caches and applies them. No lock is held while a timer
// runs or fires, so a fake clock's Step never waits on the watcher.
type Watcher struct {
	target Reconfigurer
	// synced: the informers' caches are filled and their initial adds
	// have reached this watcher's handlers.
	synced  []cache.InformerSynced
	fs      listers.FlowSchemaLister
	pl      listers.PriorityLevelConfigurationLister
	opts    Options
	changes chan struct{}

	// Owned by Run's goroutine.
	lastText []byte

	mu      sync.Mutex
	lastErr error
}

// New registers the watcher's event handlers with factory's FlowSchema and
// PriorityLevelConfiguration informers. Start the factory and call Run.
func New(target Reconfigurer, factory informers.SharedInformerFactory, opts Options) (*Watcher, error) {
	if target == nil || factory == nil {
		return nil, errors.New("apfwatch.New: target and factory must not be nil")
	}
	if opts.Debounce < 0 {
		return nil, fmt.Errorf("apfwatch.New: Options.Debounce is negative (%v)", opts.Debounce)
	}
	if opts.Debounce == 0 {
		opts.Debounce = DefaultDebounce
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.FieldManager == "" {
		opts.FieldManager = DefaultFieldManager
	}
	fc := factory.Flowcontrol().V1()
	w := &Watcher{
		target:  target,
		fs:      fc.FlowSchemas().Lister(),
		pl:      fc.PriorityLevelConfigurations().Lister(),
		opts:    opts,
		changes: make(chan struct{}, 1),
	}
	handler := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { w.changed() },
		UpdateFunc: w.updated,
		DeleteFunc: func(any) { w.changed() },
	}
	fsReg, err := fc.FlowSchemas().Informer().AddEventHandler(handler)
	if err != nil {
		return nil, fmt.Errorf("apfwatch.New: FlowSchema informer: %w", err)
	}
	plReg, err := fc.PriorityLevelConfigurations().Informer().AddEventHandler(handler)
	if err != nil {
		return nil, fmt.Errorf("apfwatch.New: PriorityLevelConfiguration informer: %w", err)
	}
	w.synced = []cache.InformerSynced{fsReg.HasSynced, plReg.HasSynced}
	return w, nil
}

// changed notes a change; a note already pending covers this one.
func (w *Watcher) changed() {
	select {
	case w.changes <- struct{}{}:
	default:
	}
}

// updated ignores updates that change nothing the watcher uses (a status
// write, a resync, other metadata): what goes into the configuration,
// plus the Dangling condition when the write-back is on.
func (w *Watcher) updated(oldObj, newObj any) {
	if w.relevant(oldObj) != w.relevant(newObj) {
		w.changed()
	}
}

// relevant is the part of an object the watcher reacts to, as a
// comparable string ("" for an object of another type, which then always
// counts as changed when its counterpart is known).
func (w *Watcher) relevant(obj any) string {
	var it item
	var cond *flowcontrol.FlowSchemaCondition
	switch o := obj.(type) {
	case *flowcontrol.FlowSchema:
		it = schemaItem(o)
		cond = danglingCondition(o)
	case *flowcontrol.PriorityLevelConfiguration:
		it = levelItem(o)
	default:
		return fmt.Sprintf("%p", obj)
	}
	text, err := encodeItem(it)
	if err != nil {
		return fmt.Sprintf("%p", obj)
	}
	if w.opts.StatusClient != nil && cond != nil {
		text += "\x00" + string(cond.Status) + "\x00" + cond.Reason + "\x00" + cond.Message
	}
	return text
}

// Run waits for the informers' caches to sync, applies the objects at
// once, then applies them again after every burst of changes (Debounce
// after its first change), until ctx ends. It returns ctx's error, or an
// error if the caches never synced.
func (w *Watcher) Run(ctx context.Context) error {
	if !cache.WaitForCacheSync(ctx.Done(), w.synced...) {
		if err := ctx.Err(); err != nil {
			return err
		}
		return errors.New("apfwatch: the informers' caches did not sync")
	}
	for {
		// Every change delivered so far is in the caches now: listing
		// them covers it, and a later one leaves a new note.
		select {
		case <-w.changes:
		default:
		}
		w.report(w.apply(ctx))
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-w.changes:
		}
		t := w.opts.Clock.NewTimer(w.opts.Debounce)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C():
		}
	}
}

func (w *Watcher) report(r Result) {
	w.mu.Lock()
	w.lastErr = r.Err
	w.mu.Unlock()
	if r.Err != nil {
		klog.ErrorS(r.Err, "apfwatch: the flow-control objects were refused; the last good configuration stays in force")
	}
	if r.StatusErr != nil {
		klog.ErrorS(r.StatusErr, "apfwatch: writing FlowSchema status")
	}
	if w.opts.OnApplied != nil {
		w.opts.OnApplied(r)
	}
}

// LastError is the error of the last apply: nil if its objects are in
// force, else why the last good configuration stayed.
func (w *Watcher) LastError() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.lastErr
}

// apply gives the dispatcher the objects in the caches, then writes the
// status conditions back if that is on.
func (w *Watcher) apply(ctx context.Context) Result {
	schemas, levels, err := w.list()
	if err != nil {
		return Result{Err: err}
	}
	r := Result{FlowSchemas: len(schemas), PriorityLevels: len(levels)}
	text, err := configText(schemas, levels)
	switch {
	case err != nil:
		r.Err = err
	case w.lastText != nil && string(text) == string(w.lastText):
		r.Unchanged = true
	default:
		if err := w.target.Reconfigure(text); err != nil {
			r.Err = fmt.Errorf("apfwatch: %d FlowSchemas and %d PriorityLevelConfigurations refused: %w",
				len(schemas), len(levels), err)
		} else {
			w.lastText = text
		}
	}
	if w.opts.StatusClient != nil {
		r.StatusWrites, r.StatusErr = w.writeStatus(ctx, schemas, levels)
	}
	return r
}

func (w *Watcher) list() ([]*flowcontrol.FlowSchema, []*flowcontrol.PriorityLevelConfiguration, error) {
	schemas, err := w.fs.List(everything)
	if err != nil {
		return nil, nil, fmt.Errorf("apfwatch: listing FlowSchemas: %w", err)
	}
	levels, err := w.pl.List(everything)
	if err != nil {
		return nil, nil, fmt.Errorf("apfwatch: listing PriorityLevelConfigurations: %w", err)
	}
	return schemas, levels, nil
}
