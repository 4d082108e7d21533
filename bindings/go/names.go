package apf

import (
	"sync"
	"sync/atomic"
)

// names caches the Go copies of the flow schema and priority level names
// and UIDs behind libapf's decision ids. libapf never reuses an id within a
// dispatcher and keeps the same id for the same name and UID across
// reconfigurations, so an entry never goes stale; the table is indexed by
// the id's low bits (its index within the dispatcher) and keeps the whole
// id to refuse anything else. Reads take no lock, hash nothing and
// allocate nothing; a miss asks libapf once (apf_dispatcher_name) and
// publishes a copied table.
type names struct {
	mu  sync.Mutex
	tab atomic.Pointer[[]namePair]
}

// nameIndexBits is how many low bits of an id are its index (libapf's
// ID_INDEX_BITS).
const nameIndexBits = 20

type namePair struct {
	id        uint32
	name, uid string
}

func (n *names) lookup(id uint32) (namePair, bool) {
	if t := n.tab.Load(); t != nil {
		i := int(id & (1<<nameIndexBits - 1))
		if i < len(*t) && (*t)[i].id == id && id != 0 {
			return (*t)[i], true
		}
	}
	return namePair{}, false
}

// get gives the pair behind id, asking fetch (libapf) on a miss.
func (n *names) get(id uint32, fetch func(uint32) (string, string, error)) (namePair, error) {
	if v, ok := n.lookup(id); ok {
		return v, nil
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if v, ok := n.lookup(id); ok {
		return v, nil
	}
	name, uid, err := fetch(id)
	if err != nil {
		return namePair{}, err
	}
	v := namePair{id, name, uid}
	i := int(id & (1<<nameIndexBits - 1))
	var fresh []namePair
	if old := n.tab.Load(); old != nil {
		fresh = make([]namePair, max(len(*old), i+1))
		copy(fresh, *old)
	} else {
		fresh = make([]namePair, i+1)
	}
	fresh[i] = v
	n.tab.Store(&fresh)
	return v, nil
}

// classification turns a decision's ids into names.
func (d *Dispatcher) classification(dec *decision) (Classification, error) {
	fs, err := d.c.names.get(dec.schemaID(), d.nameC)
	if err != nil {
		return Classification{}, err
	}
	pl, err := d.c.names.get(dec.levelID(), d.nameC)
	if err != nil {
		return Classification{}, err
	}
	return Classification{
		FlowSchema:       fs.name,
		FlowSchemaUID:    fs.uid,
		PriorityLevel:    pl.name,
		PriorityLevelUID: pl.uid,
	}, nil
}
