package metrics

import (
	"cmp"
	"slices"
)

// MaxLabelValues caps the distinct values of a label whose values come from names in the store (job
// folders): any user who can write the store can create thousands of folders, and a series each would
// blow up the endpoint and the Prometheus behind it. The values beyond it are exported as one series
// with the value OtherLabel, and ckguard_metric_label_values_folded_total counts them.
const MaxLabelValues = 200

// OtherLabel is the label value the folded values are exported under. A store name equal to it is
// folded too, so one series never mixes a real name with the others.
const OtherLabel = "(other)"

// FoldLabels keeps at most limit-1 values of vals by name when vals has more than limit, the most
// important first (weight descending, then by name, so the choice is stable from one export to the
// next), and merges the rest into OtherLabel; it returns the map to export and how many values it
// folded.
func FoldLabels[V any](vals map[string]V, limit int, merge func(a, b V) V, weight func(V) int) (map[string]V, int) {
	_, clash := vals[OtherLabel]
	if len(vals) <= limit && !clash {
		return vals, 0
	}
	names := make([]string, 0, len(vals))
	for k := range vals {
		if k != OtherLabel {
			names = append(names, k)
		}
	}
	slices.SortFunc(names, func(a, b string) int {
		if c := cmp.Compare(weight(vals[b]), weight(vals[a])); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	})
	keep := len(names)
	if len(vals) > limit {
		keep = limit - 1
	}
	out := make(map[string]V, keep+1)
	for _, k := range names[:keep] {
		out[k] = vals[k]
	}
	folded := 0
	var other V
	for _, k := range names[keep:] {
		other = merge(other, vals[k])
		folded++
	}
	if v, ok := vals[OtherLabel]; ok {
		other = merge(other, v)
		folded++
	}
	out[OtherLabel] = other
	return out, folded
}
