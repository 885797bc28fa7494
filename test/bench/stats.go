package bench

import (
	"math"
	"slices"
	"time"
)

// Percentile is the nearest-rank p-th percentile (0 < p <= 100) of sorted
// durations: the smallest value with at least p% of the values at or below
// it. Zero for no values.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	rank = min(max(rank, 1), len(sorted))
	return sorted[rank-1]
}

// Spread is the median and the range of one figure over rounds.
type Spread struct {
	Median Num `json:"median"`
	Min    Num `json:"min"`
	Max    Num `json:"max"`
	N      int `json:"n"` // rounds that had the figure
}

// SpreadOf summarises values; NaN values (a figure a round did not have,
// such as the webhook CPU per call without calls) are left out.
func SpreadOf(values []float64) Spread {
	var v []float64
	for _, x := range values {
		if !math.IsNaN(x) {
			v = append(v, x)
		}
	}
	if len(v) == 0 {
		return Spread{Median: Num(math.NaN()), Min: Num(math.NaN()), Max: Num(math.NaN())}
	}
	slices.Sort(v)
	med := v[len(v)/2]
	if len(v)%2 == 0 {
		med = (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	return Spread{Median: Num(med), Min: Num(v[0]), Max: Num(v[len(v)-1]), N: len(v)}
}

// Ratio is a/b, NaN when either is missing or b is zero.
func Ratio(a, b float64) float64 {
	if math.IsNaN(a) || math.IsNaN(b) || b == 0 {
		return math.NaN()
	}
	return a / b
}

// perUnit is total/n, NaN for n == 0 (no unit to divide by).
func perUnit(total, n float64) float64 {
	if n == 0 {
		return math.NaN()
	}
	return total / n
}
