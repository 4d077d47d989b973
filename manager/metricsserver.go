package manager

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/apis/apiserver"
	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"ome.io/quota-manager/webhook"
)

// secureMetrics wraps the /metrics handler in authentication and
// authorization delegated to the API server, as Kubernetes components do:
// the scraper's bearer token is checked with a TokenReview, and its right
// to get the non-resource URL /metrics with a SubjectAccessReview. Both
// answers are cached (a token for a minute; an allow for five minutes, a
// deny for 30 s), so a scrape every 15 s costs the API server a couple of
// requests a few times an hour. A missing or refused token gets 401, a
// refused identity 403.
func secureMetrics(ctx context.Context, cfg *rest.Config, h http.Handler) (http.Handler, error) {
	log := klog.FromContext(ctx).WithName("metrics")
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	backoff := &wait.Backoff{Duration: 500 * time.Millisecond, Factor: 1.5, Jitter: 0.2, Steps: 5}
	authn, _, err := authenticatorfactory.DelegatingAuthenticatorConfig{
		Anonymous:                &apiserver.AnonymousAuthConfig{Enabled: false},
		CacheTTL:                 time.Minute,
		TokenAccessReviewClient:  kube.AuthenticationV1(),
		TokenAccessReviewTimeout: 10 * time.Second,
		WebhookRetryBackoff:      backoff,
	}.New()
	if err != nil {
		return nil, fmt.Errorf("building the metrics endpoint's authentication: %w", err)
	}
	authz, err := authorizerfactory.DelegatingAuthorizerConfig{
		SubjectAccessReviewClient: kube.AuthorizationV1(),
		AllowCacheTTL:             5 * time.Minute,
		DenyCacheTTL:              30 * time.Second,
		WebhookRetryBackoff:       backoff,
	}.New()
	if err != nil {
		return nil, fmt.Errorf("building the metrics endpoint's authorization: %w", err)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		res, ok, err := authn.AuthenticateRequest(r)
		if err != nil || !ok {
			// The API server refused the token, or there is none.
			log.V(4).Info("scrape refused: not authenticated", "err", err)
			http.Error(w, "Unauthorized: send a bearer token that the API server accepts", http.StatusUnauthorized)
			return
		}
		user := res.User
		decision, reason, err := authz.Authorize(r.Context(), authorizer.AttributesRecord{
			User: user, Verb: strings.ToLower(r.Method), Path: r.URL.Path,
		})
		if err != nil {
			log.Error(err, "cannot ask the API server whether a scraper may read /metrics", "user", user.GetName())
			http.Error(w, "cannot check the scraper's rights with the API server: "+err.Error(), http.StatusInternalServerError)
			return
		}
		if decision != authorizer.DecisionAllow {
			log.V(4).Info("scrape refused: not authorized", "user", user.GetName(), "reason", reason)
			http.Error(w, fmt.Sprintf("Forbidden: %s may not get /metrics: bind it to a ClusterRole that allows get on the non-resource URL /metrics", user.GetName()), http.StatusForbidden)
			return
		}
		h.ServeHTTP(w, r)
	}), nil
}

// metricsTLS is the metrics endpoint's TLS configuration, from the
// package that holds the product's certificate code.
func metricsTLS(ctx context.Context, dir, addr string) (*tls.Config, error) {
	cfg, err := webhook.ServingTLS(ctx, dir, addr)
	if err != nil && dir != "" {
		return nil, fmt.Errorf("--metrics-cert-dir=%s: %w", dir, err)
	}
	return cfg, err
}
