package apply

import (
	"encoding/json"
	"testing"
)

func decode(t *testing.T, s string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestCovers(t *testing.T) {
	desired := `{"metadata":{"name":"a","labels":{"l":"v"}},"spec":{"cohortName":"c","resourceGroups":[{"flavors":[{"name":"f","resources":[{"name":"g","nominalQuota":"8","borrowingLimit":"0"}]}]}]}}`
	cases := map[string]struct {
		cached string
		want   bool
	}{
		"identical": {desired, true},
		"server defaults and other owners' fields": {
			`{"metadata":{"name":"a","uid":"u","labels":{"l":"v","other":"x"}},"spec":{"cohortName":"c","queueingStrategy":"BestEffortFIFO","resourceGroups":[{"flavors":[{"name":"f","resources":[{"name":"g","nominalQuota":"8","borrowingLimit":"0"}]}]}]},"status":{"x":1}}`, true},
		"a changed amount": {
			`{"metadata":{"name":"a","labels":{"l":"v"}},"spec":{"cohortName":"c","resourceGroups":[{"flavors":[{"name":"f","resources":[{"name":"g","nominalQuota":"9","borrowingLimit":"0"}]}]}]}}`, false},
		"a field we no longer set, inside a list": {
			`{"metadata":{"name":"a","labels":{"l":"v"}},"spec":{"cohortName":"c","resourceGroups":[{"flavors":[{"name":"f","resources":[{"name":"g","nominalQuota":"8","borrowingLimit":"0","lendingLimit":"2"}]}]}]}}`, false},
		"an extra list element": {
			`{"metadata":{"name":"a","labels":{"l":"v"}},"spec":{"cohortName":"c","resourceGroups":[{"flavors":[{"name":"f","resources":[{"name":"g","nominalQuota":"8","borrowingLimit":"0"}]},{"name":"h","resources":[]}]}]}}`, false},
		"our label missing": {
			`{"metadata":{"name":"a"},"spec":{"cohortName":"c","resourceGroups":[{"flavors":[{"name":"f","resources":[{"name":"g","nominalQuota":"8","borrowingLimit":"0"}]}]}]}}`, false},
		"another cohort": {
			`{"metadata":{"name":"a","labels":{"l":"v"}},"spec":{"cohortName":"d","resourceGroups":[{"flavors":[{"name":"f","resources":[{"name":"g","nominalQuota":"8","borrowingLimit":"0"}]}]}]}}`, false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := covers(decode(t, desired), decode(t, tc.cached)); got != tc.want {
				t.Errorf("covers = %v, want %v", got, tc.want)
			}
		})
	}
}
