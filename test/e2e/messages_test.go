package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1beta1 "ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/api/v1beta1/aqtest"
)

// TestLongLoopGetsItsStatus: 500 Cohorts of 63-character names whose
// parentRefs form one loop. Listing the whole loop in each member's
// condition messages would pass the CRD's 32,768 bytes, the API server
// would refuse the status write, and the nodes would keep stale
// conditions; the messages name a few members and count the rest, so
// every member's status lands.
func TestLongLoopGetsItsStatus(t *testing.T) {
	ctx := context.Background()
	const n = 500
	name := func(i int) string { return fmt.Sprintf("loop-%03d-%s", i, strings.Repeat("x", 54)) }
	deleteAll := func() {
		for i := range n {
			_ = aqs.Delete(ctx, name(i), metav1.DeleteOptions{})
		}
	}
	t.Cleanup(deleteAll)
	startManager(t, "loop")
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < n; i += 8 {
				_, err := aqs.Create(ctx, aqtest.Cohort(name(i), name((i+1)%n)).Obj(), metav1.CreateOptions{})
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	eventually(t, 60*time.Second, func() string {
		list, err := aqs.List(ctx, metav1.ListOptions{})
		if err != nil {
			return err.Error()
		}
		waiting := 0
		var example string
		for i := range list.Items {
			aq := &list.Items[i]
			if !strings.HasPrefix(aq.Name, "loop-") {
				continue
			}
			ready, degraded := condition(aq, "Ready"), condition(aq, "Degraded")
			if ready == nil || ready.Reason != "ParentCycle" || degraded == nil || degraded.Status != metav1.ConditionTrue {
				waiting++
				example = fmt.Sprintf("%s: Ready %+v, Degraded %+v", aq.Name, ready, degraded)
				continue
			}
			if len(ready.Message) > 1024 || !strings.Contains(ready.Message, "... 493 more ...") {
				return fmt.Sprintf("%s: a message of %d bytes: %s", aq.Name, len(ready.Message), ready.Message)
			}
		}
		if waiting > 0 {
			return fmt.Sprintf("%d of %d members without their ParentCycle status, e.g. %s", waiting, n, example)
		}
		return ""
	})
	root, err := aqs.Get(ctx, v1beta1.RootName, metav1.GetOptions{})
	require.NoError(t, err)
	require.Equal(t, "True", string(condition(root, "Ready").Status), "root is not in the loop")
	deleteAll()
}
