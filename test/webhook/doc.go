// Package webhook tests the quota manager's admission webhook end to end on
// a real kube-apiserver and etcd on loopback: the ValidatingWebhookConfiguration
// from config/webhook points at the manager's webhook on 127.0.0.1, so the
// API server itself calls it, and kubectl prints what a user sees. It
// covers the guide's "Change the tree" and "kubectl apply fails with a
// webhook error" sections, an overrun written while the webhook was off, a
// budget above capacity, two replicas agreeing on one certificate, the
// wedge of a deleted Secret and its recovery, and the rotation and reload
// of the certificate.
package webhook
