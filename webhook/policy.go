package webhook

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"ome.io/quota-manager/api/v1beta1"
)

// SourcesAnnotation is the chart's note on its NetworkPolicy of where the
// webhook port's sources came from: "lookup" (the API server's addresses
// at render time, which go stale when those change) or "values"
// (networkPolicy.apiServerCIDRs).
const SourcesAnnotation = "ome.io/apiserver-sources"

// policyInterval is how often the NetworkPolicy is compared with the API
// server's addresses: a signal for people, not a safety bound.
const policyInterval = time.Minute

// PolicyCheck is one comparison of the webhook's NetworkPolicy with the
// API server's addresses (the kubernetes EndpointSlice of namespace
// default).
type PolicyCheck struct {
	// Sources is the policy's SourcesAnnotation ("values" when absent).
	Sources string
	// Open: a rule admits every source to the webhook port.
	Open bool
	// CIDRs are the blocks the policy admits to the webhook port, and
	// Outside the API server's addresses in none of them.
	CIDRs, Outside []string
	// Addresses are the API server's.
	Addresses []string
}

// String says what the check found, for people.
func (c PolicyCheck) String() string {
	switch {
	case c.Open:
		return "open: a rule of the NetworkPolicy admits every source to the webhook port"
	case len(c.Outside) == 0:
		return fmt.Sprintf("current: every API server address (%s) is among the webhook port's sources (%s, from %s)",
			strings.Join(c.Addresses, ", "), strings.Join(c.CIDRs, ", "), c.Sources)
	case c.Sources == "lookup":
		return fmt.Sprintf("stale: the API server at %s is not among the webhook port's sources (%s), read from its addresses at the last install or upgrade: it cannot reach the webhook, which fails closed; run helm upgrade to read them again, or set quotaManager.networkPolicy.apiServerCIDRs",
			strings.Join(c.Outside, ", "), strings.Join(c.CIDRs, ", "))
	}
	return fmt.Sprintf("the API server's addresses %s are not among quotaManager.networkPolicy.apiServerCIDRs (%s): right where it calls webhooks through a proxy listed there, else it cannot reach the webhook",
		strings.Join(c.Outside, ", "), strings.Join(c.CIDRs, ", "))
}

// CheckPolicy compares the webhook port's sources in policy with the API
// server's addresses: which of them no source admits.
func CheckPolicy(policy *networkingv1.NetworkPolicy, port int, addresses []string) PolicyCheck {
	c := PolicyCheck{Sources: policy.Annotations[SourcesAnnotation], Addresses: addresses}
	if c.Sources == "" {
		c.Sources = "values"
	}
	type block struct {
		in     *net.IPNet
		except []*net.IPNet
	}
	var blocks []block
	for _, r := range policy.Spec.Ingress {
		admits := len(r.Ports) == 0
		for _, p := range r.Ports {
			if p.Port == nil || p.Port.IntValue() == port || (p.EndPort != nil && p.Port.IntValue() <= port && port <= int(*p.EndPort)) {
				admits = true
			}
		}
		if !admits {
			continue
		}
		if len(r.From) == 0 {
			c.Open = true
		}
		for _, from := range r.From {
			if from.IPBlock == nil {
				continue
			}
			_, in, err := net.ParseCIDR(from.IPBlock.CIDR)
			if err != nil {
				continue
			}
			b := block{in: in}
			for _, e := range from.IPBlock.Except {
				if _, ex, err := net.ParseCIDR(e); err == nil {
					b.except = append(b.except, ex)
				}
			}
			blocks = append(blocks, b)
			c.CIDRs = append(c.CIDRs, from.IPBlock.CIDR)
		}
	}
	if c.Open {
		return c
	}
	for _, a := range addresses {
		ip := net.ParseIP(a)
		admitted := slices.ContainsFunc(blocks, func(b block) bool {
			return ip != nil && b.in.Contains(ip) && !slices.ContainsFunc(b.except, func(e *net.IPNet) bool { return e.Contains(ip) })
		})
		if !admitted {
			c.Outside = append(c.Outside, a)
		}
	}
	return c
}

// apiServerAddresses are the addresses of the kubernetes EndpointSlice
// in namespace default, where the API server publishes its own.
func apiServerAddresses(ctx context.Context, kube kubernetes.Interface) ([]string, error) {
	es, err := kube.DiscoveryV1().EndpointSlices("default").Get(ctx, "kubernetes", metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("reading the API server's addresses (EndpointSlice default/kubernetes): %w", err)
	}
	var out []string
	for _, e := range es.Endpoints {
		out = append(out, e.Addresses...)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// runPolicyCheck compares the NetworkPolicy --webhook-network-policy
// names with the API server's addresses now and every policyInterval,
// until ctx ends: each result goes to ome_quota_webhook_policy_apiservers_outside,
// and, when it changes, to the log and the webhook configuration's
// WebhookPolicyAnnotation.
func (s *Server) runPolicyCheck(ctx context.Context) {
	if s.opts.NetworkPolicy == "" {
		return
	}
	log := klog.FromContext(ctx)
	ns, name, _ := namespacedName("--webhook-network-policy", s.opts.NetworkPolicy)
	last := ""
	tick := time.NewTicker(policyInterval)
	defer tick.Stop()
	for {
		what, check, err := s.checkPolicy(ctx, ns, name)
		if s.metrics != nil {
			s.metrics.WebhookPolicyOutside.Reset()
			if err == nil && !check.Open {
				s.metrics.WebhookPolicyOutside.WithLabelValues(check.Sources).Set(float64(len(check.Outside)))
			}
		}
		if what != last {
			last = what
			if err != nil || len(check.Outside) > 0 || check.Open {
				log.Error(err, "the webhook's NetworkPolicy", "policy", ns+"/"+name, "found", what)
			} else {
				log.Info("the webhook's NetworkPolicy", "policy", ns+"/"+name, "found", what)
			}
			go annotate(ctx, s.kube, s.opts.ConfigName, v1beta1.WebhookPolicyAnnotation, reported(what, s.opts.Identity, time.Now()))
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// checkPolicy reads the policy and the API server's addresses and
// compares them; what says what it found, or why it could not.
func (s *Server) checkPolicy(ctx context.Context, ns, name string) (string, PolicyCheck, error) {
	policy, err := s.kube.NetworkingV1().NetworkPolicies(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return fmt.Sprintf("absent: there is no NetworkPolicy %s/%s, so the webhook port admits what the cluster's network lets through", ns, name), PolicyCheck{}, err
	}
	if err != nil {
		return "unknown: " + err.Error(), PolicyCheck{}, err
	}
	addrs, err := apiServerAddresses(ctx, s.kube)
	if err != nil {
		return "unknown: " + err.Error(), PolicyCheck{}, err
	}
	check := CheckPolicy(policy, s.opts.Port, addrs)
	return check.String(), check, nil
}
