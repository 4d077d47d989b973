// Package replay reads a recorded event log (package store) and applies it
// to a fresh state with the same reducer the manager runs, offline, to
// explain what the manager did: the timeline of every node's transitions
// with the event behind each, one node's history, the chain of causes behind
// a node's state (a frozen team back to the Node deletion that lowered the
// high-water mark), a node's audit trail (who asked for each write, the
// webhook's verdict, the change, and what the tree did next, merged across
// the logs of several replicas; a user is named as a change's author only
// when the write their admitted verdict allowed is the one the log then
// holds, see attribute), the state, the nodes' statuses (with
// Materialized from the leader's recorded outcomes: StateView) and the
// desired Kueue objects at any point, and what-if runs that replay the same
// inputs under another configuration (the recorded outcomes as they were)
// and list the transitions that would have differed.
//
// A replay is deterministic: the same log always gives the same state and
// the same bytes of output, since the reducer reads no clock and every input
// it used is in the log.
package replay
