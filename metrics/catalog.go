package metrics

import (
	"slices"

	"github.com/prometheus/client_golang/prometheus"
)

// Type is a metric's Prometheus type.
type Type string

// Metric types.
const (
	Counter   Type = "counter"
	Gauge     Type = "gauge"
	Histogram Type = "histogram"
)

// Spec declares one metric: the collectors are built from it and
// docs/metrics.md lists it.
type Spec struct {
	Name    string
	Type    Type
	Help    string
	Labels  []string
	Buckets []float64
	// Source says where the value comes from, for the document.
	Source string
}

func (s Spec) desc() *prometheus.Desc { return prometheus.NewDesc(s.Name, s.Help, s.Labels, nil) }

const (
	scrape     = "state, at scrape time"
	applier    = "applier"
	consumer   = "event consumer"
	webhookSrc = "webhook"
	election   = "leader election"
	recorder   = "events recorder"
	binary     = "binary"
	kueueCfg   = "Kueue's configuration, polled"
	aqCache    = "AcceleratorQuota cache"
	aqCRD      = "AcceleratorQuota CRD, polled"
	modeFlag   = "--mode"
)

var (
	budgetLabels = []string{"plane", "quota", "role", "resource", "flavor"}
	shareLabels  = []string{"quota", "resource", "flavor", "cluster"}
	pairLabels   = []string{"resource", "flavor"}
)

// The state's gauges, read at scrape time.
var (
	mBudgetNominal = Spec{Name: "ome_quota_budget_nominal", Type: Gauge, Labels: budgetLabels, Source: scrape,
		Help: "A tree node's nominal budget per resource and flavor."}
	mBudgetAdmitted = Spec{Name: "ome_quota_budget_admitted", Type: Gauge, Labels: budgetLabels, Source: scrape,
		Help: "What a team's admitted workloads use, from its ClusterQueue's status; on a management plane, the sum of its members' parts (ome_quota_budget_share_admitted)."}
	mBudgetReserved = Spec{Name: "ome_quota_budget_reserved", Type: Gauge, Labels: budgetLabels, Source: scrape,
		Help: "What a team's workloads hold a quota reservation for; on a management plane, the sum of its members' parts (ome_quota_budget_share_reserved)."}
	mBudgetBorrowed = Spec{Name: "ome_quota_budget_borrowed", Type: Gauge, Labels: budgetLabels, Source: scrape,
		Help: "What a team uses above its nominal, borrowed from its cohort; on a management plane, the sum of its members' parts (ome_quota_budget_share_borrowed)."}
	mNodeReady = Spec{Name: "ome_quota_node_ready", Type: Gauge, Labels: []string{"quota", "role", "reason"}, Source: scrape,
		Help: "1 when a tree node is Ready, else 0; reason is Admitted or the rule it breaks (Frozen below a node that breaks one)."}
	mNodes = Spec{Name: "ome_quota_nodes", Type: Gauge, Labels: []string{"state"}, Source: scrape,
		Help: "Tree nodes per state: Ready, or the reason a node is not."}
	mCapacityAllocatable = Spec{Name: "ome_quota_capacity_allocatable", Type: Gauge, Labels: pairLabels, Source: scrape,
		Help: "Accelerators on Ready, uncordoned nodes, per resource and flavor."}
	mCapacityInstalled = Spec{Name: "ome_quota_capacity_installed", Type: Gauge, Labels: pairLabels, Source: scrape,
		Help: "Accelerators on every node, cordoned and NotReady included, per resource and flavor."}
	mCapacityUnavailable = Spec{Name: "ome_quota_capacity_unavailable", Type: Gauge, Labels: pairLabels, Source: scrape,
		Help: "Accelerators on cordoned or NotReady nodes, per resource and flavor: installed, so in the mark, but not allocatable."}
	mCapacityMark = Spec{Name: "ome_quota_capacity_high_water_mark", Type: Gauge, Labels: pairLabels, Source: scrape,
		Help: "The damped peak of installed capacity that budgets are checked against."}
	mCapacityObserved = Spec{Name: "ome_quota_capacity_observed_timestamp_seconds", Type: Gauge, Labels: pairLabels, Source: scrape,
		Help: "When the pair was last measured (root's observedAt), in Unix seconds."}
	mCapacityReportInterval = Spec{Name: "ome_quota_capacity_report_interval_seconds", Type: Gauge, Source: scrape,
		Help: "The configured --capacity-report-interval; 0 when the refresh of observedAt is off."}
	mCapacityFailing = Spec{Name: "ome_quota_capacity_source_failing", Type: Gauge, Labels: []string{"source"}, Source: scrape,
		Help: "1 while an informer that capacity is measured from (nodes, deviceclasses, resourceslices) cannot list or watch; root's observedAt stamps stop meanwhile."}
	mCapacityNodes = Spec{Name: "ome_quota_capacity_nodes", Type: Gauge, Labels: []string{"state"}, Source: scrape,
		Help: "Kubernetes Nodes by how capacity counts them: schedulable, cordoned, not_ready."}
	mUnattributed = Spec{Name: "ome_quota_capacity_unattributed", Type: Gauge, Labels: []string{"resource", "reason"}, Source: scrape,
		Help: "Installed capacity that no ResourceFlavor's budget can use, per resource and reason."}
	mUnattributedNodes = Spec{Name: "ome_quota_capacity_unattributed_nodes", Type: Gauge, Labels: []string{"reason"}, Source: scrape,
		Help: "Nodes carrying unattributed capacity, per reason."}
	mDRAUnbudgeted = Spec{Name: "ome_quota_dra_unbudgeted_devices", Type: Gauge, Labels: []string{"deviceclass"}, Source: scrape,
		Help: "DRA devices published under a DeviceClass that no mapping names, per DeviceClass: no budget covers them."}
	mEnrolled = Spec{Name: "ome_quota_enrolled_namespaces", Type: Gauge, Source: scrape,
		Help: "Namespaces enrolled for LocalQueues; while 0 nothing is written to Kueue."}
	mStreamDepth = Spec{Name: "ome_quota_event_stream_depth", Type: Gauge, Source: scrape,
		Help: "Events waiting in the stream."}
	mBudgetShare = Spec{Name: "ome_quota_budget_share", Type: Gauge, Labels: shareLabels, Source: scrape,
		Help: "On a management plane, a member cluster's share of a team's fleet budget: the nominal its copy there carries."}
	mShareAdmitted = Spec{Name: "ome_quota_budget_share_admitted", Type: Gauge, Labels: shareLabels, Source: scrape,
		Help: `On a management plane, what a member cluster's Kueue admitted for its copy of a team, as the member last reported; ome_quota_budget_admitted{plane="management"} is their sum, so sum one or the other, never both.`}
	mShareReserved = Spec{Name: "ome_quota_budget_share_reserved", Type: Gauge, Labels: shareLabels, Source: scrape,
		Help: `On a management plane, what a member cluster's workloads hold a quota reservation for under its copy of a team, as the member last reported; ome_quota_budget_reserved{plane="management"} is their sum.`}
	mShareBorrowed = Spec{Name: "ome_quota_budget_share_borrowed", Type: Gauge, Labels: shareLabels, Source: scrape,
		Help: `On a management plane, what a member cluster's copy of a team uses above its share, borrowed from its cohort there, as the member last reported; ome_quota_budget_borrowed{plane="management"} is their sum.`}
	mPlaneInfo = Spec{Name: "ome_quota_plane_info", Type: Gauge, Labels: []string{"plane"}, Source: modeFlag,
		Help: "Always 1; plane is the manager's mode (workload or management), as on the budget gauges. Series without a plane label take it from this one (group_left (plane))."}
	mMemberSilent = Spec{Name: "ome_quota_member_silent_seconds", Type: Gauge, Labels: []string{"cluster"}, Source: scrape,
		Help: "On a management plane, seconds since the plane last heard from the member cluster: 0 while it answers; else since its first failed read, or since the plane started listing it when it never answered."}
	mMemberCopiesBehind = Spec{Name: "ome_quota_member_copies_behind", Type: Gauge, Labels: []string{"cluster"}, Source: scrape,
		Help: "On a management plane, the copies a member cluster should hold that it does not, or holds made from an older generation of their node, as it last reported."}
	mFleetHeld = Spec{Name: "ome_quota_fleet_held", Type: Gauge, Labels: []string{"quota", "resource", "flavor"}, Source: scrape,
		Help: `On a management plane, the most the member clusters together may hold of a fleet node's budget (nominal), per resource and flavor: for each member, the largest of its copy as read back, what the plane may have written there since, and the team's hold record; summed over the node's teams and the members. Compare with ome_quota_budget_nominal{plane="management"}: it is above only while a lowered budget waits for members that do not answer.`}
	mMemberReachable = Spec{Name: "ome_quota_member_reachable", Type: Gauge, Labels: []string{"cluster"}, Source: scrape,
		Help: "On a management plane, 1 while the member cluster answers and has reported, 0 while it does not (its shares and copies are kept as they were)."}
)

// The instrumented metrics.
var (
	mApplied = Spec{Name: "ome_quota_backend_applied_total", Type: Counter, Labels: []string{"kind"}, Source: applier,
		Help: "Objects the shell brought to, or confirmed at, their desired state, one node at a time."}
	mSwept = Spec{Name: "ome_quota_backend_swept_total", Type: Counter, Labels: []string{"kind"}, Source: applier,
		Help: "Managed objects deleted because no node wants them."}
	mWrites = Spec{Name: "ome_quota_backend_writes_total", Type: Counter, Labels: []string{"kind", "verb"}, Source: applier,
		Help: "Write requests sent to the API server."}
	mWriteErrors = Spec{Name: "ome_quota_backend_write_errors_total", Type: Counter, Labels: []string{"kind", "verb"}, Source: applier,
		Help: "Write requests that failed."}
	mApplySeconds = Spec{Name: "ome_quota_backend_apply_seconds", Type: Histogram, Source: applier,
		Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
		Help:    "Duration of one node's materialization: compare its objects, write what differs, sweep."}
	mFullComparison = Spec{Name: "ome_quota_full_comparison_nodes_total", Type: Counter, Labels: []string{"result"}, Source: shellQueue,
		Help: "Nodes the periodic full comparison (each tick) looked at, by result: queued (changed since last found in place, or never), paced (unchanged but last compared a resync interval ago: queued spread over the tick), unchanged (skipped)."}
	mEvents = Spec{Name: "ome_quota_events_total", Type: Counter, Labels: []string{"kind"}, Source: consumer,
		Help: "Events applied to the state, by kind."}
	mEventLag = Spec{Name: "ome_quota_event_lag_seconds", Type: Histogram, Source: consumer,
		Buckets: prometheus.ExponentialBuckets(0.0005, 4, 10),
		Help:    "Time from an event's receipt to its application."}
	mEventLogErrors = Spec{Name: "ome_quota_event_log_errors_total", Type: Counter, Source: consumer,
		Help: "Events that could not be appended to the recorded event log (--event-log), and periodic syncs of it that failed; a replay reports the gap."}
	mWebhookVerdicts = Spec{Name: "ome_quota_webhook_verdicts_total", Type: Counter, Labels: []string{"operation", "verdict"}, Source: webhookSrc,
		Help: "Admission answers, by operation and verdict."}
	mWebhookLedger = Spec{Name: "ome_quota_webhook_ledger_total", Type: Counter, Labels: []string{"outcome"}, Source: webhookSrc,
		Help: "Judged writes by what they did to the admission ledger: reserved, conflict (lost the compare-and-swap and judged again), failed, denied, lowering (a team's lowering needs no reservation), standing (admitted under a standing reservation of this replica's, writing nothing), dry-run, already (reserved before) or unavailable (refused with retry)."}
	mWebhookUncertain = Spec{Name: "ome_quota_webhook_uncertain_total", Type: Counter, Source: webhookSrc,
		Help: "Reviews judged while related reservations, admitted moments ago, had not been seen to land: each was judged on every combination of them, or on the one that bounds the others when more than three only raise, create or delete teams (at once when admitted there, else after at most the webhook's patience, 1s), or refused with retry."}
	mWebhookBound = Spec{Name: "ome_quota_webhook_bound_total", Type: Counter, Labels: []string{"outcome"}, Source: webhookSrc,
		Help: "Reviews judged beside more than three related reservations not yet seen to land, on the bound of those that nothing names as a parent (and every combination of at most three others), by outcome: admitted, refused, or unbounded (more than three could not be bounded: refused with retry)."}
	mWebhookWaits = Spec{Name: "ome_quota_webhook_waits_total", Type: Counter, Labels: []string{"for", "outcome"}, Source: webhookSrc,
		Help: "Reviews that had to wait where a caller could make them wait, by what for (base: the API server's answer on a base this replica has not seen; settle: related reservations to settle) and outcome: waited, or full (the waiting slots, a quarter of --webhook-max-in-flight, were taken: a review that needed the API server was refused with retry, one beside unsettled reservations answered on its first look)."}
	mWebhookWaiting = Spec{Name: "ome_quota_webhook_waiting", Type: Gauge, Source: webhookSrc,
		Help: "Reviews holding a waiting slot now (for the API server's answer on a base, or for related reservations to settle); at most a quarter of --webhook-max-in-flight."}
	mWebhookCallers = Spec{Name: "ome_quota_webhook_callers_authenticated", Type: Gauge, Source: webhookSrc,
		Help: "1 when the webhook serves only clients with a client certificate its client CA signed (the API server, configured to present one), 0 when it serves any client that reaches its port."}
	mWebhookPolicyOutside = Spec{Name: "ome_quota_webhook_policy_apiservers_outside", Type: Gauge, Labels: []string{"sources"}, Source: webhookSrc,
		Help: "The API server's addresses (EndpointSlice default/kubernetes) that the webhook's NetworkPolicy (--webhook-network-policy) does not admit to the webhook port, compared every minute; sources is where the policy's came from: lookup (the addresses at the last install or upgrade, stale when above 0) or values (networkPolicy.apiServerCIDRs, which may name a proxy instead). Absent while the policy cannot be read or admits every source."}
	mWebhookReview = Spec{Name: "ome_quota_webhook_review_seconds", Type: Histogram, Labels: []string{"verdict"}, Source: webhookSrc,
		Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
		Help:    "Time from a review's arrival to its answer, by verdict."}
	mWebhookJudge = Spec{Name: "ome_quota_webhook_judge_seconds", Type: Histogram, Source: webhookSrc,
		Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
		Help:    "Time to judge a tree write: waiting for this replica's view to reach the ledger's floor and for related reservations to settle, judging, and reserving."}
	mDRAMappingsDiffer = Spec{Name: "ome_quota_dra_mappings_differ", Type: Gauge, Labels: []string{"config"}, Source: kueueCfg,
		Help: "1 while the DRA deviceClassMappings in Kueue's configuration (the ConfigMap --dra-kueue-config names) differ from those the quota manager measures by, 0 while they match; absent while it cannot be read."}
	mUndecodable = Spec{Name: "ome_quota_undecodable_objects", Type: Gauge, Labels: []string{"name"}, Source: aqCache,
		Help: "1 for each AcceleratorQuota this replica cannot decode (a field of another type than the quota manager's, such as a string priorityTier): it is left out of the tree, or kept at the last version that decoded. The series goes when the object decodes again or is deleted."}
	mStatusUnwritten = Spec{Name: "ome_quota_status_fields_unwritten", Type: Gauge, Labels: []string{"field"}, Source: aqCRD,
		Help: "1 for each status field the installed AcceleratorQuota CRD does not declare (OME's own CRD has no status.summary nor status.unbudgeted): status writes leave it out. No series while the CRD declares every field."}
	mLeader = Spec{Name: "ome_quota_leader", Type: Gauge, Source: election,
		Help: "1 while this replica holds the leader lease."}
	mLeaderTransitions = Spec{Name: "ome_quota_leader_transitions_total", Type: Counter, Source: election,
		Help: "Times this replica became the leader."}
	mKubeEvents = Spec{Name: "ome_quota_kube_events_total", Type: Counter, Labels: []string{"reason"}, Source: recorder,
		Help: "Kubernetes Events emitted on tree node transitions, by reason."}
	mBuildInfo = Spec{Name: "ome_quota_build_info", Type: Gauge, Labels: []string{"version", "revision", "goversion"}, Source: binary,
		Help: "Always 1; the labels say which build runs."}
)

// Catalog lists every metric of the manager, by name. The Go runtime's
// and the process's standard metrics (go_*, process_*) come on top.
func Catalog() []Spec {
	out := append(slices.Clone(stateSpecs),
		mApplied, mSwept, mWrites, mWriteErrors, mApplySeconds, mFullComparison, mEvents, mEventLag, mEventLogErrors,
		mWebhookVerdicts, mWebhookLedger, mWebhookUncertain, mWebhookBound, mWebhookWaits, mWebhookWaiting, mWebhookCallers, mWebhookPolicyOutside, mWebhookReview, mWebhookJudge,
		mDRAMappingsDiffer, mUndecodable, mStatusUnwritten, mLeader, mLeaderTransitions, mKubeEvents, mBuildInfo,
		mQueueDepth, mQueueAdds, mQueueRetries, mQueueLatency, mQueueWork, mQueueUnfinished, mQueueLongest,
	)
	sortSpecs(out)
	return out
}
