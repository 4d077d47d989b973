package webhook

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"ome.io/quota-manager/webhook"
)

// TestPolicyComparedWithTheAPIServer: a replica given the NetworkPolicy
// that admits the API server to its port (--webhook-network-policy)
// compares its sources, looked up at render time, with the API server's
// addresses now (the kubernetes EndpointSlice). While they hold every
// address it says so; once the policy leaves one out (as when the control
// plane's addresses change after the install), the next replica to start
// reports it: in ome_quota_webhook_policy_apiservers_outside{sources="lookup"}
// (what OmeQuotaWebhookPolicyStale alerts on), its log, and kubectl ome
// quota status root, which also says its callers are not authenticated.
func TestPolicyComparedWithTheAPIServer(t *testing.T) {
	ctx := context.Background()
	es, err := cluster.Kube.DiscoveryV1().EndpointSlices("default").Get(ctx, "kubernetes", metav1.GetOptions{})
	require.NoError(t, err)
	var blocks []networkingv1.NetworkPolicyPeer
	for _, e := range es.Endpoints {
		for _, a := range e.Addresses {
			blocks = append(blocks, networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: a + "/32"}})
		}
	}
	require.NotEmpty(t, blocks, "the API server publishes no address")
	ensureSecret(t)
	port := freePort(t)
	installConfig(t, port)
	wp := intstr.FromInt(port)
	policy := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "policy-test", Namespace: ns, Annotations: map[string]string{webhook.SourcesAnnotation: "lookup"}},
		Spec: networkingv1.NetworkPolicySpec{Ingress: []networkingv1.NetworkPolicyIngressRule{
			{Ports: []networkingv1.NetworkPolicyPort{{Port: &wp}}, From: blocks}}},
	}
	nps := cluster.Kube.NetworkingV1().NetworkPolicies(ns)
	_, err = nps.Create(ctx, policy, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = nps.Delete(context.Background(), policy.Name, metav1.DeleteOptions{}) })

	current := startReplica(t, "policy-current", port, "--webhook-network-policy="+ns+"/"+policy.Name)
	eventually(t, time.Minute, func() string {
		if v, err := current.Metric(ctx, "ome_quota_webhook_policy_apiservers_outside", `sources="lookup"`); err != nil || v != 0 {
			return fmt.Sprintf("outside: %v, %v", v, err)
		}
		if out := statusRoot(t); !strings.Contains(out, "NetworkPolicy current: every API server address") ||
			!strings.Contains(out, "Callers not authenticated: any client that reaches port") {
			return "status root does not say the policy is current and the callers unauthenticated:\n" + out
		}
		return ""
	})
	// Series exist: the metric was set, not merely absent.
	require.Contains(t, metricsText(t, current), "ome_quota_webhook_policy_apiservers_outside{sources=\"lookup\"} 0")
	require.Equal(t, 0.0, current.metric(t, "ome_quota_webhook_callers_authenticated"))
	current.Stop()

	policy, err = nps.Get(ctx, policy.Name, metav1.GetOptions{})
	require.NoError(t, err)
	policy.Spec.Ingress[0].From = []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "192.0.2.99/32"}}}
	_, err = nps.Update(ctx, policy, metav1.UpdateOptions{})
	require.NoError(t, err)
	stale := startReplica(t, "policy-stale", port, "--webhook-network-policy="+ns+"/"+policy.Name)
	eventually(t, time.Minute, func() string {
		v, err := stale.Metric(ctx, "ome_quota_webhook_policy_apiservers_outside", `sources="lookup"`)
		if err != nil || v != float64(len(blocks)) {
			return fmt.Sprintf("outside: %v, %v; want %d", v, err, len(blocks))
		}
		if out := statusRoot(t); !strings.Contains(out, "NetworkPolicy stale: the API server at") || !strings.Contains(out, "(replica policy-stale") {
			return "status root does not say the policy is stale:\n" + out
		}
		return ""
	})
	log, err := os.ReadFile(stale.Log)
	require.NoError(t, err)
	require.Contains(t, string(log), "is not among the webhook port's sources (192.0.2.99/32)")
}

// metricsText is the replica's /metrics page.
func metricsText(t *testing.T, r *replica) string {
	t.Helper()
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", r.MetricsPort))
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(b)
}
