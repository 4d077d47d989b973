// Package webhook is the quota manager's validating admission webhook for
// AcceleratorQuotas and the keeper of its certificates. Every replica
// serves it; docs/webhook.md says what it guarantees and why.
//
// Reviewer (review.go) answers admission.k8s.io/v1 AdmissionReviews for
// CREATE, UPDATE and DELETE. It refuses a malformed review with code 400
// and a message that says what is wrong, refuses a spec past the CRD's
// limits before decoding it (v1beta1.CheckObjectLimits), and admits at
// once an update that changes nothing the rules read (state.SameShape).
// Every other write goes to the Ledger (ledger.go): it judges the write
// with the core's rule book on the manager's state plus the reservations
// of the AdmissionLedger (writes some replica admitted and has not seen
// land), and reserves an admitted write there with a compare-and-swap
// before it answers. A lowering of a team's budgets is judged at once and
// reserved nowhere; a dry run is judged and reserved nowhere. A denial is
// code 403 with one line per violation; an answer that cannot be known
// yet is code 503 with "retry".
//
// Certs (bootstrap.go, certs.go) keeps the serving certificate in the
// Secret that every replica shares, and the CA bundle in the
// ValidatingWebhookConfiguration. Server (server.go, servingtls.go) serves
// HTTPS on --webhook-port, only at Path, within bounds on connections,
// bodies and reviews in flight, and reports readiness for /readyz.
//
// The certificates are kept here rather than by
// open-policy-agent/cert-controller, which Kueue uses: it runs inside a
// controller-runtime Manager and its cache, and the product uses client-go
// alone. Certs retries a failed pass after a delay that doubles up to
// 30 s, in three lines that client-go's wait.Backoff would not shorten.
package webhook
