package harness

import (
	"math"
	"testing"
	"time"
)

// TestHist checks that quantiles are within a bucket's width.
func TestHist(t *testing.T) {
	var h Hist
	for i := 1; i <= 10000; i++ {
		h.Add(time.Duration(i) * time.Microsecond)
	}
	for _, c := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 5000 * time.Microsecond}, {0.99, 9900 * time.Microsecond}, {1, 10000 * time.Microsecond}} {
		got := h.Quantile(c.q)
		if math.Abs(float64(got-c.want)) > float64(c.want)/subBuckets {
			t.Errorf("Quantile(%v) = %v, want %v within 1/%d", c.q, got, c.want, subBuckets)
		}
	}
	for ns := uint64(0); ns < 1<<20; ns += 7 {
		if i := bucketOf(ns); i < 0 || i >= len(h.counts) || i > 0 && bucketOf(ns-1) > i {
			t.Fatalf("bucketOf(%d) = %d: out of range or not monotonic", ns, i)
		}
	}
	var empty Hist
	if empty.Quantile(0.5) != 0 {
		t.Error("an empty histogram has a quantile")
	}
}

// TestHistMerge checks that merging adds counts, and that negative
// durations count as 0.
func TestHistMerge(t *testing.T) {
	var a, b Hist
	a.Add(time.Microsecond)
	b.Add(-time.Second)
	b.Add(time.Millisecond)
	a.Merge(&b)
	if a.Count() != 3 {
		t.Fatalf("Count() = %d after merging, want 3", a.Count())
	}
	if got := a.Quantile(0.01); got != 0 {
		t.Errorf("lowest quantile %v, want 0 (the negative duration)", got)
	}
	if got := a.Quantile(1); math.Abs(float64(got-time.Millisecond)) > float64(time.Millisecond)/subBuckets {
		t.Errorf("Quantile(1) = %v, want about 1ms", got)
	}
}
