// Package webhook is the quota manager's validating admission webhook for
// AcceleratorQuotas and the bootstrap of its certificates. Every replica
// serves it.
//
// # Admission
//
// Reviewer answers admission.k8s.io/v1 AdmissionReviews for CREATE, UPDATE
// and DELETE of an AcceleratorQuota with the core's rule book (package
// state, admission.go): a write is denied for the violations it adds, by
// (node, reason, subject) as state.Diff keys them, or makes worse under the
// same key (a larger overrun of the same budget, a node too deep that goes
// deeper). So a write that shrinks an existing overrun is admitted, and one
// that grows it is denied. Deleting root or a node that has children, and
// any write of root that gives it a parent or a role other than Cohort, are
// denied. CapacityExceeded does not deny: the write is admitted with a
// warning, which kubectl prints. Frozen is a consequence of another node's
// rule, never a cause.
//
// A denial is allowed: false with code 403 and a message of one line per
// violation, "node: message" with the rule book's own message, joined by
// "; " (ContainmentViolated's message starts with the node already), e.g.
//
//	ml-research: budget nvidia.com/gpu on a100 is 24 but its children total 28
//
// Malformed input (not an AdmissionReview v1, no uid, not an
// AcceleratorQuota, an object that does not decode) gets code 400 and a
// message saying what is wrong, with the caller's strings clipped; a
// request body over MaxRequestBytes gets HTTP 413. Review never panics;
// FuzzReview checks it. Amounts are checked for size before they are parsed
// (v1beta1.CheckSpecLimits).
//
// An update that changes nothing the rules read (state.SameShape: a label,
// a finalizer) is admitted at once. Every other write goes to the Ledger
// (ledger.go), which judges it on the manager's state (state.State.Admit,
// O(depth + children), no LIST) plus the reservations of the
// AdmissionLedger, a cluster-scoped object that lists the writes some
// replica admitted and has not seen land, and adds its own reservation with
// a compare-and-swap before it admits. A reservation settles when the
// state shows its write landed or unable to land (state.State.Settled), and
// expires on each replica's own clock; a write that depends on one still
// unsettled is judged on every combination of them landing, or refused
// with "retry". A lowering of a team's budgets (state.State.AdmitLowering)
// cannot change another write's verdict: it is judged at once and reserved
// nowhere. Until the state has synced, writes other than root's are
// answered 503 (retry). Dry runs are judged the same way and reserved
// nowhere (sideEffects: NoneOnDryRun). docs/webhook.md says why this is
// correct and what it costs.
//
// # Certificates
//
// Certs keeps the serving certificate in the Secret named by
// --webhook-cert-secret (keys ca.crt, ca.key, tls.crt, tls.key), which is
// the source of truth shared by every replica. It never creates the Secret:
// while the Secret is missing there is no certificate, TLS handshakes fail,
// writes fail closed, and Ready explains how to recover. It issues a CA and
// a serving certificate for the Service's DNS names and --webhook-cert-hosts
// when the Secret holds none that fits, writes them with an optimistic
// Update (a replica that loses the race serves what the winner wrote),
// injects the CA bundle into every webhook of the ValidatingWebhookConfiguration
// and keeps it there, serves a changed Secret without a restart, and renews a
// certificate once less than a third of its lifetime is left (CA 10 years,
// serving certificate 1 year). A new CA is published beside the old one
// until the old one expires.
//
// Server ties them together: HTTPS on --webhook-port (HTTP/1.1 over TLS
// 1.2 or newer), Path for reviews, and Ready for the manager's /readyz: a
// replica is ready only once its webhook serves a certificate that
// verifies against the injected CA bundle.
package webhook
