package apf

import "time"

// RateLimiter describes how AddRateLimited delays an item: one of client-go's
// rate limiters, built by the constructors below. It is a description only:
// each queue made with it gets its own limiter state, on the queue's clock.
type RateLimiter struct {
	kind     wqLimiterKind
	qps      float64
	burst    uint32
	a, b     time.Duration
	attempts uint32
	children []*RateLimiter
}

// DefaultControllerRateLimiter is client-go's: the larger of a per-item
// exponential backoff from 5 ms to 1000 s and an overall token bucket of
// 10 qps with a burst of 100.
func DefaultControllerRateLimiter() *RateLimiter {
	return &RateLimiter{kind: limiterDefault}
}

// NewItemExponentialFailureRateLimiter delays an item's n-th failure by
// base·2^(n-1), at most max (client-go's ItemExponentialFailureRateLimiter).
func NewItemExponentialFailureRateLimiter(base, max time.Duration) *RateLimiter {
	return &RateLimiter{kind: limiterExponential, a: base, b: max}
}

// NewBucketRateLimiter is one token bucket for all items: qps tokens per
// second, up to burst at once (client-go's BucketRateLimiter).
func NewBucketRateLimiter(qps float64, burst int) *RateLimiter {
	return &RateLimiter{kind: limiterTokenBucket, qps: qps, burst: clampU32(burst)}
}

// NewItemBucketRateLimiter is a token bucket per item (client-go's
// ItemBucketRateLimiter).
func NewItemBucketRateLimiter(qps float64, burst int) *RateLimiter {
	return &RateLimiter{kind: limiterItemTokenBucket, qps: qps, burst: clampU32(burst)}
}

// NewItemFastSlowRateLimiter delays an item's first maxFastAttempts
// failures by fast, later ones by slow (client-go's ItemFastSlowRateLimiter).
func NewItemFastSlowRateLimiter(fast, slow time.Duration, maxFastAttempts int) *RateLimiter {
	return &RateLimiter{kind: limiterFastSlow, a: fast, b: slow, attempts: clampU32(maxFastAttempts)}
}

// NewMaxOfRateLimiter gives the longest delay of its limiters, each of which
// counts the failure (client-go's MaxOfRateLimiter).
func NewMaxOfRateLimiter(limiters ...*RateLimiter) *RateLimiter {
	return &RateLimiter{kind: limiterMaxOf, children: append([]*RateLimiter(nil), limiters...)}
}

// clampU32 maps an int parameter onto the C uint32: negative values become
// 0 (which libapf refuses where it matters), huge ones saturate.
func clampU32(n int) uint32 {
	switch {
	case n < 0:
		return 0
	case uint64(n) > uint64(^uint32(0)):
		return ^uint32(0)
	}
	return uint32(n)
}
