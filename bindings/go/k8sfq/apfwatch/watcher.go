// Package apfwatch keeps a libapf dispatcher's configuration in step with
// the FlowSchema and PriorityLevelConfiguration objects of a cluster,
// through client-go informers. Every server of a fleet that watches the
// same cluster ends up with the same configuration, with no coordination
// of its own: as KEP-1040 says, each apiserver runs API Priority and
// Fairness independently on the objects it sees.
package apfwatch

import (
	"encoding/json"
	"fmt"
	"sort"
	"sync"
	"time"

	apf "github.com/libapf/apf-go"
	flowcontrol "k8s.io/api/flowcontrol/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	listers "k8s.io/client-go/listers/flowcontrol/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
)

// Options tune a Watcher. Zero values take the defaults.
type Options struct {
	// Debounce: a burst of object changes is applied once, this long after
	// its first change (default 100 ms).
	Debounce time.Duration
	// Clock runs the debounce timer (default the real clock).
	Clock clock.WithDelayedExecution
	// OnApplied is called after each attempt to apply the objects, with
	// nil or the error that kept the last good configuration in force.
	OnApplied func(error)
}

// Reconfigurer is what a Watcher drives: *apf.Dispatcher.
type Reconfigurer interface {
	Reconfigure(config []byte) error
}

var _ Reconfigurer = (*apf.Dispatcher)(nil)

// Watcher reconfigures a dispatcher whenever the objects change. When a
// new set of objects is invalid, the dispatcher keeps the last good
// configuration (libapf refuses the whole change) and OnApplied hears why.
type Watcher struct {
	target Reconfigurer
	fs     listers.FlowSchemaLister
	pl     listers.PriorityLevelConfigurationLister
	opts   Options

	mu      sync.Mutex
	pending clock.Timer
	lastErr error
}

// New registers the watcher's event handlers with factory's FlowSchema and
// PriorityLevelConfiguration informers; start the factory, then Run.
func New(target Reconfigurer, factory informers.SharedInformerFactory, opts Options) (*Watcher, error) {
	if opts.Debounce <= 0 {
		opts.Debounce = 100 * time.Millisecond
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	fc := factory.Flowcontrol().V1()
	w := &Watcher{target: target, fs: fc.FlowSchemas().Lister(), pl: fc.PriorityLevelConfigurations().Lister(), opts: opts}
	handler := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { w.changed() },
		UpdateFunc: func(any, any) { w.changed() },
		DeleteFunc: func(any) { w.changed() },
	}
	if _, err := fc.FlowSchemas().Informer().AddEventHandler(handler); err != nil {
		return nil, err
	}
	if _, err := fc.PriorityLevelConfigurations().Informer().AddEventHandler(handler); err != nil {
		return nil, err
	}
	return w, nil
}

// changed arms the debounce timer unless it is armed already.
func (w *Watcher) changed() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.pending == nil {
		w.pending = w.opts.Clock.AfterFunc(w.opts.Debounce, w.fire)
	}
}

func (w *Watcher) fire() {
	w.mu.Lock()
	w.pending = nil
	w.mu.Unlock()
	err := w.Apply()
	if w.opts.OnApplied != nil {
		w.opts.OnApplied(err)
	}
}

// LastError is the error of the last attempt to apply, nil if it applied.
func (w *Watcher) LastError() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.lastErr
}

// Apply gives the dispatcher the objects in the informers' caches now.
func (w *Watcher) Apply() error {
	text, err := w.configText()
	if err == nil {
		err = w.target.Reconfigure(text)
	}
	w.mu.Lock()
	w.lastErr = err
	w.mu.Unlock()
	return err
}

// configText is the cached objects as a kubectl-style JSON List, in name
// order so that equal object sets give equal text.
func (w *Watcher) configText() ([]byte, error) {
	schemas, err := w.fs.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	levels, err := w.pl.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	sort.Slice(schemas, func(i, j int) bool { return schemas[i].Name < schemas[j].Name })
	sort.Slice(levels, func(i, j int) bool { return levels[i].Name < levels[j].Name })
	items := make([]any, 0, len(schemas)+len(levels))
	for _, l := range levels {
		c := l.DeepCopy()
		c.APIVersion, c.Kind = flowcontrol.SchemeGroupVersion.String(), "PriorityLevelConfiguration"
		items = append(items, c)
	}
	for _, s := range schemas {
		c := s.DeepCopy()
		c.APIVersion, c.Kind = flowcontrol.SchemeGroupVersion.String(), "FlowSchema"
		items = append(items, c)
	}
	text, err := json.Marshal(map[string]any{"apiVersion": "v1", "kind": "List", "items": items})
	if err != nil {
		return nil, fmt.Errorf("apfwatch: encoding the objects: %w", err)
	}
	return text, nil
}
