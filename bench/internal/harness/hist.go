package harness

import (
	"math"
	"math/bits"
	"time"
)

// subBits sets a histogram's precision: 2^subBits buckets per power of two,
// so a bucket is at most 1/32 (about 3 %) of its values wide.
const subBits = 5

const subBuckets = 1 << subBits

// Hist counts durations in logarithmic buckets. Adding one is a few
// instructions and never allocates, so every call's latency can be
// recorded without disturbing what is measured. The zero value is empty.
// A Hist is not safe for concurrent use: give each goroutine its own and
// Merge them afterwards.
type Hist struct {
	counts [64 * subBuckets]uint64
	n      uint64
}

// bucketOf returns the bucket of ns: exact below 32 ns, then 32 buckets
// per power of two.
func bucketOf(ns uint64) int {
	if ns < subBuckets {
		return int(ns)
	}
	shift := bits.Len64(ns) - subBits - 1
	return (shift+1)<<subBits + int(ns>>shift) - subBuckets
}

// bucketMid returns the middle of bucket i's range of nanoseconds.
func bucketMid(i int) uint64 {
	if i < subBuckets {
		return uint64(i)
	}
	shift := i>>subBits - 1
	lo := uint64(i&(subBuckets-1)+subBuckets) << shift
	return lo + (uint64(1)<<shift)/2
}

// Add records one duration; negative ones count as 0.
func (h *Hist) Add(d time.Duration) {
	h.counts[bucketOf(uint64(max(d, 0)))]++
	h.n++
}

// Merge adds o's counts to h's.
func (h *Hist) Merge(o *Hist) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
}

// Count returns how many durations were recorded.
func (h *Hist) Count() uint64 { return h.n }

// Quantile returns the q-quantile (0 < q <= 1) of the recorded durations,
// to within a bucket's width; 0 when nothing was recorded.
func (h *Hist) Quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(h.n)))
	rank = min(max(rank, 1), h.n)
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			return time.Duration(bucketMid(i))
		}
	}
	return time.Duration(bucketMid(len(h.counts) - 1))
}
