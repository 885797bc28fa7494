package holds

import (
	"math"
	"strings"
	"testing"
	"time"
)

// Every --hold-write-rate outside 1-1000 is refused with the flag, the
// value and the default named, NaN and the infinities included (a float
// flag parses "NaN" and "Inf").
func TestValidateRefusesAWriteRateOutsideItsRange(t *testing.T) {
	for _, rate := range []float64{0, 0.5, -5, 1000.5, 1e9, math.NaN(), math.Inf(1), math.Inf(-1)} {
		o := Options{Enabled: true, Grace: time.Second, WriteRate: rate}
		err := o.Validate()
		if err == nil || !strings.Contains(err.Error(), "--hold-write-rate") || !strings.Contains(err.Error(), "default 50") {
			t.Errorf("--hold-write-rate %g: %v, want a refusal naming the flag and the default", rate, err)
		}
	}
	for _, rate := range []float64{1, 50, 1000} {
		o := Options{Enabled: true, Grace: time.Second, WriteRate: rate}
		if err := o.Validate(); err != nil {
			t.Errorf("--hold-write-rate %g: %v, want it accepted", rate, err)
		}
	}
	if err := (&Options{WriteRate: math.NaN()}).Validate(); err != nil {
		t.Errorf("holds off: %v, want the rate not checked", err)
	}
}
