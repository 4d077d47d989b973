// Package plane is the shell of a management plane (--mode=management):
// the manager.Mode that a plane's manager runs beside the shell every
// replica shares. It reads the plane's inventory of member clusters
// (ClusterProfiles, or a ConfigMap of kubeconfig Secrets, each access
// checked before use) into Membership events; watches each member
// (MemberSource) into Member events, so that the state splits the fleet's
// budgets on what the members report and a fleet log replays offline; and,
// on the leader alone, runs one copier per member that brings the member
// to the copies the state plans for it (projector.Copies, written by
// apply.CopyWriter), reports how the members hold each node's copies as
// Outcome events, and keeps the copies finalizer on the fleet's teams.
//
// The package imports manager and reaches it through manager.Host only;
// manager never imports it. cmd/ome-quota-manager picks plane.New or
// manager.New by --mode.
package plane
