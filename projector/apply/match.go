package apply

import (
	"encoding/json"
	"reflect"
)

// covers reports whether actual already holds every field of desired with
// the same value, so that applying desired would change nothing we own.
// Maps may hold more keys in actual (fields others own or the API server
// defaults); lists must have the same length, element by element. Inside
// list elements the keys must match exactly: that is where a field we used
// to set and no longer do (a lendingLimit) would otherwise go unnoticed,
// and Kueue defaults nothing there.
func covers(desired, actual any) bool {
	return coversAt(desired, actual, false)
}

func coversAt(desired, actual any, strict bool) bool {
	switch d := desired.(type) {
	case map[string]any:
		a, ok := actual.(map[string]any)
		if !ok {
			return false
		}
		if strict && len(a) != len(d) {
			return false
		}
		for k, dv := range d {
			av, ok := a[k]
			if !ok || !coversAt(dv, av, false) {
				return false
			}
		}
		return true
	case []any:
		a, ok := actual.([]any)
		if !ok || len(a) != len(d) {
			return false
		}
		for i := range d {
			if !coversAt(d[i], a[i], true) {
				return false
			}
		}
		return true
	default:
		return reflect.DeepEqual(desired, actual)
	}
}

// toJSONMap round-trips a value through JSON, giving the generic form both
// sides are compared in (quantities in their canonical text).
func toJSONMap(v any) (map[string]any, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, err
	}
	return m, nil
}
