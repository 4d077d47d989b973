// Package state is the quota manager's pure, event-sourced core: the
// reducer, the rule book, a state machine for every tree node, and root's
// capacity with its high-water marks.
//
// # Using it
//
// Build a State with New and Apply every event of the stream to it, in
// order, from one goroutine. Apply returns the phase transitions the event
// caused. Read the result through the queries: Nodes, Node and NodeStatus
// for the tree (phase, reason, message, parent, children, depth, own
// violations); Capacity and CapacityStatus for root's status.capacity, with
// CapacityNeedsWrite saying when root's stored status must be rewritten;
// Unattributed and UnattributedTotals for NoMatchingFlavor capacity
// (UnattributedDRA for DRA devices); Unbudgeted for devices of unmapped
// DeviceClasses and DRAProblems for selectors that fail; Usage
// for a team's ClusterQueue usage; Config for the configuration in force;
// Outcome for the leader's applier's last report on a node (the
// Materialized condition) and Leader for the replica that leads, both from
// their events (outcome.go says what a non-leader's state means).
// Clone gives a snapshot for other goroutines; Dump renders the state as
// text, identical byte for byte for identical states.
//
// The state never reads a clock, a network or a random source: time comes
// from the events (receipt times and Ticks), so replaying a log gives the
// same state, transitions and dump.
//
// # Rules
//
// The rule book (DECISIONS.md) is a set of pure functions over Facts and an
// Env, one per rule: CheckParent, CheckKind, CheckDepth, CheckFlavors,
// CheckContainment and CheckCapacity, run in Precedence order by
// EvaluateNode. Evaluate applies them to a whole hypothetical Tree from
// scratch, for the webhook and `kubectl ome quota validate`; State.WhatIf
// compares the tree before and after a write, and Diff keeps what the write
// makes worse, by (node, reason, subject). The reducer applies the same
// functions incrementally and always agrees with Evaluate.
//
// # Admission
//
// The admission rules sit beside the others (admission.go), so that the
// webhook, the reducer and `kubectl ome quota validate` share them: Admit
// judges one write on a whole Tree from scratch, O(tree); State.Admit gives
// the same answer from the reducer's indexes (children, children's sums,
// places), reading only the nodes the write can change, O(children) for a
// change of budgets or role and O(depth) plus the nodes that move for a
// move. A write is denied for what it adds by (node, reason, subject), or
// makes worse under the same key (a larger overrun of the same budget, a
// node too deep that sits deeper), so a write that shrinks an existing
// overrun is admitted. CapacityExceeded is a warning, never a denial.
// Deleting root or a node with children, and a root with a parent or not a
// Cohort, are always denied. SameShape says whether a write can change any
// verdict at all.
//
// Each node is in the phase of its primary (first) violation; a node that
// breaks no rule is Frozen when an ancestor breaks one (its message names
// the nearest such ancestor and its reason), else Ready. Decisions where
// the spec is silent:
//
//   - The precedence is ParentMissing, ParentCycle, Unreachable,
//     NodeKindInvalid, DepthExceeded, FlavorMissing, ContainmentViolated,
//     CapacityExceeded; a node's own violation wins over Frozen.
//   - A child under a ClusterQueue is the one that breaks NodeKindInvalid.
//     Root must be a Cohort without a parentRef (NodeKindInvalid); it is
//     root by name, at depth 0, whatever its parentRef says. Only root
//     carries spec.goneClusters (NodeKindInvalid elsewhere; gone.go).
//   - ContainmentViolated is on the Cohort whose budget its children's
//     total exceeds; only Cohorts are checked.
//   - A pair without a high-water mark counts as mark 0, so a budget on a
//     flavor not yet measured is CapacityExceeded until it is. A budget on
//     a flavor that does not exist is FlavorMissing and not checked against
//     capacity.
//   - Several violations of a node's primary reason are all in its
//     message, joined by "; ".
//
// # Capacity
//
// Capacity is a sum of contributions: each Node contributes its capacity
// and allocatable to the (measured resource, flavor) pairs of the flavors
// it matches, so a Node event costs O(resources x flavors). A
// ResourceFlavor event re-matches every Node, O(nodes); so does a change of
// the measured resources. Decisions where the spec is silent:
//
//   - A measurement happens on a Node event, on an AcceleratorQuota event
//     that creates or deletes a node or changes what the rules read of it,
//     on a Config event and on a Tick; not on a ResourceFlavor event (as the
//     guide says, a new flavor appears with the next measurement) and not
//     on a status write.
//     Nothing is measured before the Synced event, which the shell sends
//     once every informer's initial list has gone through its handler into
//     the stream; a Tick before it measures nothing. Until then the marks
//     are those read back from root's status, and the partial view of the
//     initial lists lowers nothing and is never reported.
//   - A pair is measured while some matching Node lists the resource in its
//     capacity or allocatable, even at 0 (a restarting device plugin reports
//     0: that is a reading). A pair no Node lists keeps its mark, at
//     allocatable 0; its entry is dropped only when that mark is 0 and the
//     pair is no longer a measured resource on an existing flavor. A mark
//     read back from root's status is kept the same way: a pool scaled to
//     zero while the manager was down keeps its mark through the restart,
//     whatever the band.
//   - observedAt is per entry, in whole seconds: an entry whose figures
//     change is stamped at the event's time, and a measurement restamps
//     every entry (kept ones included) whose stamp is a report interval
//     old. A MeasureFailed event restamps nothing.
//   - Root's status after Synced is the state's own output: it is
//     not read back again, only compared (CapacityNeedsWrite).
//   - Unattributed capacity is a Node's installed amount of a measured
//     resource, when the Node matches no flavor; it follows Node and flavor
//     events at once.
//   - Amounts are int64 milli-units. A budget amount above MaxAmount
//     (10^15 units) breaks BudgetInvalid and its nominal adds nothing to
//     its parent's children total, so every figure a message prints is
//     exact; capacity read from a Node is clamped to MaxAmount. A
//     children's total is a Total (128 bits), since ten teams near
//     MaxAmount already pass an int64: containment is judged on the
//     exact sum, and messages print it.
//
// # DRA capacity
//
// DRA capacity is a contribution too, per resource pool: a ResourceSlice
// event computes its pool's contribution again, O(devices in the pool x
// DeviceClass selectors), and replaces the old one in the tallies of the
// nodes it touches. The reducer evaluates the DeviceClasses' CEL selectors
// itself (CompileSelector, k8s.io/dynamic-resource-allocation's compiler):
// a compiled program is deterministic, so the state stays a function of
// the events. A DeviceClass event or a change of the mappings evaluates
// every device again, O(devices). Decisions where the spec is silent:
//
//   - The logical names (the mappings' names, and the extendedResourceName
//     of a DeviceClass no mapping names) are measured resources like the
//     configured ones, on every flavor.
//   - A pool counts only when complete: its newest generation's slices all
//     present and numbering resourceSliceCount.
//   - A counter source counts each counter set once per mapping, however
//     many selected devices consume it.
//   - Node-local devices count toward the flavors of their node; for a
//     logical name that is also a measured resource, a node counts the
//     larger of its status figure and its DRA devices, never the sum.
//     Devices on a cordoned or NotReady node are not allocatable.
//   - allNodes devices count toward flavors without nodeLabels; nodeSelector
//     devices toward flavors whose labels each term requires (key In
//     [value]); others, and devices on an unknown or unmatched node, are
//     unattributed (UnattributedDRA).
//   - A selector that does not compile selects nothing; one that fails on a
//     device leaves that device out (DRAProblems says both).
//   - Devices an unmapped DeviceClass selects are Unbudgeted, per class.
//
// # State machines
//
// Every node moves through one looplab/fsm machine, shared by the nodes of
// a state (the transition table is held once, not once per node: it was
// 13.7 MiB of a 73 MiB heap at 1,051 nodes), with one phase per rule plus
// Ready, Frozen, Pending (created, not yet evaluated) and Deleted
// (terminal). A node keeps its own phase; the machine is set to it before
// each move. Its events are named after their destination ("toReady",
// "toFrozen", ...). The reducer moves a node only when its phase changes;
// the machine's single callback, enter_state, records the Transition and
// nothing else.
package state
