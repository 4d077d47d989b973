// Package quotactl is `kubectl ome quota`: the kubectl plugin's commands
// tree, status and validate, built with cobra and k8s.io/cli-runtime.
//
// It reads the cluster through the generated typed client (api/client) and
// the Kubernetes and Kueue clientsets, and writes nothing. Every verdict
// comes from the pure core: the live objects are turned into events
// (events/sources' converters) and applied to a state.State, the same
// reducer the manager runs; validate judges each write with State.Admit,
// the function the admission webhook calls, so a denial prints the very
// message the webhook would; status compares the Kueue objects with the
// projector's desired ones. It does not import the webhook package.
package quotactl
