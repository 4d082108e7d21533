package k8sfq

import "sync"

// registryShards spreads the request registry's locks: requests of
// different flows (shard by flow hash) rarely share one.
const registryShards = 64

// registry holds the requests that Dump lists: the executing ones, and the
// waiting ones by libapf's waiting id (for their details). Sharded maps
// under mutexes rather than sync.Map, whose every new key allocates a
// node: once a shard's maps have grown to the level's concurrency, adding
// and removing a request allocates nothing.
type registry struct {
	shards [registryShards]registryShard
}

type registryShard struct {
	mu      sync.Mutex
	running map[*request]struct{}
	queued  map[uint64]*request
	// Pad to a cache line of its own, so that shards do not share one.
	_ [40]byte
}

func (g *registry) shard(hash uint64) *registryShard {
	return &g.shards[hash%registryShards]
}

func (g *registry) addRunning(r *request) {
	s := g.shard(r.hash)
	s.mu.Lock()
	if s.running == nil {
		s.running = make(map[*request]struct{})
	}
	s.running[r] = struct{}{}
	s.mu.Unlock()
}

func (g *registry) removeRunning(r *request) {
	s := g.shard(r.hash)
	s.mu.Lock()
	delete(s.running, r)
	s.mu.Unlock()
}

func (g *registry) addQueued(id uint64, r *request) {
	s := g.shard(id)
	s.mu.Lock()
	if s.queued == nil {
		s.queued = make(map[uint64]*request)
	}
	s.queued[id] = r
	s.mu.Unlock()
}

func (g *registry) removeQueued(id uint64) {
	s := g.shard(id)
	s.mu.Lock()
	delete(s.queued, id)
	s.mu.Unlock()
}

// queuedDump is the dump of waiting request id (false if it is not
// registered: it left its queue meanwhile).
func (g *registry) queuedDump(id uint64, details bool) (rd requestDump, ok bool) {
	s := g.shard(id)
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.queued[id]
	if !ok {
		return requestDump{}, false
	}
	return r.snapshot(details), true
}

// eachRunning calls fn with a snapshot of every executing request (under
// its shard's lock: fn must not call back into the registry).
func (g *registry) eachRunning(details bool, fn func(requestDump)) {
	for i := range g.shards {
		s := &g.shards[i]
		s.mu.Lock()
		for r := range s.running {
			fn(r.snapshot(details))
		}
		s.mu.Unlock()
	}
}
