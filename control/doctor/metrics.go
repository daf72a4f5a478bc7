package doctor

import (
	"bytes"
	"fmt"
	"math"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// families is one parsed /metrics page.
type families map[string]*dto.MetricFamily

func parseMetrics(b []byte) (families, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("parse Prometheus text: %w", err)
	}
	return fams, nil
}

// match reports whether m carries every label in want.
func match(m *dto.Metric, want map[string]string) bool {
	n := 0
	for _, lp := range m.GetLabel() {
		if v, ok := want[lp.GetName()]; ok {
			if lp.GetValue() != v {
				return false
			}
			n++
		}
	}
	return n == len(want)
}

func value(m *dto.Metric) float64 {
	switch {
	case m.GetCounter() != nil:
		return m.GetCounter().GetValue()
	case m.GetGauge() != nil:
		return m.GetGauge().GetValue()
	case m.GetUntyped() != nil:
		return m.GetUntyped().GetValue()
	}
	return math.NaN()
}

// gauge returns the value of the first series of name carrying labels.
func (f families) gauge(name string, labels map[string]string) (float64, bool) {
	mf := f[name]
	if mf == nil {
		return 0, false
	}
	for _, m := range mf.GetMetric() {
		if match(m, labels) {
			v := value(m)
			if math.IsNaN(v) || math.IsInf(v, 0) {
				return 0, false
			}
			return v, true
		}
	}
	return 0, false
}

// histogram returns the sample count and sum of the series of name
// carrying labels.
func (f families) histogram(name string, labels map[string]string) (count uint64, sum float64) {
	mf := f[name]
	if mf == nil {
		return 0, 0
	}
	for _, m := range mf.GetMetric() {
		if h := m.GetHistogram(); h != nil && match(m, labels) {
			count += h.GetSampleCount()
			sum += h.GetSampleSum()
		}
	}
	return count, sum
}

// byLabel sums the series of name by the value of one label.
func (f families) byLabel(name, label string) map[string]float64 {
	mf := f[name]
	if mf == nil {
		return nil
	}
	out := map[string]float64{}
	for _, m := range mf.GetMetric() {
		k := ""
		for _, lp := range m.GetLabel() {
			if lp.GetName() == label {
				k = lp.GetValue()
			}
		}
		if v := value(m); !math.IsNaN(v) && !math.IsInf(v, 0) {
			out[k] += v
		}
	}
	return out
}
